"""Workload subcommands: profiles, describe, fidelity, fit, report."""

from __future__ import annotations

from pathlib import Path

from ..errors import PolytraceError
from ._args import add_out, add_steps
from ._args import nonneg_int as _nonneg
from ._args import positive_int as _positive
from ._args import positive_int_at_most as _at_most
from ._io import print_json


def register(sub) -> None:
    p = sub.add_parser("profiles", help="list the built-in workload profiles")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser("describe", help="shape statistics of a profile or a trace")
    add_profile_arg(p, "source", "PROFILE|TRACE", "built-in profile name, fitted profile JSON, or trace")
    add_steps(p, default=None, what="steps to sample a profile at (default 0-7)")
    p.add_argument("--seed", type=_nonneg, default=0,
                   help="seed of the sampled batches (default 0; same seed, same batches on any machine)")
    p.add_argument("--drift", default=None, help="drift preset for a profile (e.g. qwen2-7b-gpg, none)")
    p.add_argument("--per-step", action="store_true", help="print one row per step")
    p.add_argument("--max-response-len", type=_positive, default=None,
                   help="a trace's response cap, when the trace does not record it")
    p.add_argument("--include-partial", action="store_true",
                   help="keep a trace's partial steps (fewer than half the median step's responses) in the means")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("fidelity", help="sampled vs real: KS, Wasserstein, quantile errors, group spread")
    add_profile_arg(p, "profile", "PROFILE", "built-in profile name or fitted profile JSON to sample")
    p.add_argument("trace", metavar="TRACE", help="the real trace (file or folder) to compare with")
    p.add_argument("--max-response-len", type=_positive, default=None,
                   help="the trace's response cap, when the trace does not record it")
    p.add_argument("--replicas", type=_at_most(1000, "replicas"), default=8,
                   help="sampled batches per real step (default 8)")
    p.add_argument("--seed", type=_nonneg, default=0,
                   help="seed of the sampled batches (default 0; same seed, same batches on any machine)")
    p.add_argument("--include-partial", action="store_true",
                   help="compare the trace's partial steps too (fewer than half the median step's responses)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_fidelity)

    p = sub.add_parser("fit", help="fit a profile to your own trace")
    p.add_argument("trace", metavar="TRACE", help="the trace (file or folder) to fit")
    add_out(p, old=("--output",), metavar="PROFILE_JSON", help="profile JSON to write (required; missing folders "
            "are created)")
    p.add_argument("--name", default=None, help="profile name (default: the trace's name)")
    p.add_argument("--description", default="", help="one-line description stored in the profile")
    p.add_argument("--max-response-len", type=_positive, default=None,
                   help="the run's response cap (default: recorded in the trace, else inferred from responses "
                        "piling up at the maximum, else the longest response; the output says which)")
    p.add_argument("--max-prompt-len", type=_positive, default=None,
                   help="the run's prompt cap (default: the longest prompt in the trace)")
    p.add_argument("--prompts-per-step", type=_positive, default=None,
                   help="prompts per step to sample (default: the trace's typical step)")
    p.add_argument("--n", type=_positive, default=None, help="responses per prompt")
    p.add_argument("--drift", default=None, help="drift preset to attach (default none)")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("report", help="the main job: workload statistics and RL step estimate, as a report")
    p.add_argument("--profile", default=None, help="profile (default dapo-math-32b)")
    p.add_argument("--model", default=None, help="model preset for the step estimate (default: the profile's)")
    p.add_argument("--gpu", default=None, help="GPU preset for the step estimate (default h200)")
    p.add_argument("--gpus", type=_positive, default=None, help="GPUs in the job (default: the profile's)")
    add_steps(p, default=None, what="steps to sample (default 0-7)")
    p.add_argument("--seed", type=_nonneg, default=0,
                   help="seed of the sampled batches (default 0; same seed, same batches on any machine)")
    add_out(p, old=("--output-dir",), metavar="DIR", default="polytrace-report",
            help="folder for report.md and plots (default polytrace-report; created when missing)")
    p.add_argument("--explain", action="store_true", help="also print what the two tail figures answer")
    p.add_argument("--roofline", action="store_true",
                   help="price at the base roofline alone, without the shared physical priors the estimate applies "
                   "by default (polytrace/data/priors.json)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (writes no folder and no file)")
    p.set_defaults(func=cmd_report)


def add_profile_arg(parser, dest: str, metavar: str, help: str) -> None:
    """The profile as a positional (as before) or as ``--profile``, the flag every other command
    takes: one spelling works everywhere."""
    parser.add_argument(dest, nargs="?", default=None, metavar=metavar, help=f"{help} (or --profile {metavar})")
    parser.add_argument("--profile", dest=f"{dest}_flag", default=None, metavar=metavar,
                        help=f"{help}: the same as the positional {metavar}")


def profile_arg(args, dest: str) -> str:
    given, flag = getattr(args, dest), getattr(args, f"{dest}_flag")
    if given is not None and flag is not None and given != flag:
        raise PolytraceError(f"{args.command}: the profile given twice: {given!r} and --profile {flag!r}")
    if given is None and flag is None:
        raise PolytraceError(f"{args.command}: a profile is required: give --profile NAME (or it as the first "
                             "argument; `polytrace profiles` lists the built-in ones)")
    return given if given is not None else flag


def load_source(text: str, drift: str | None = None, max_response_len: int | None = None):
    """A profile (built-in name or profile JSON) or a trace, decided by what ``text`` names."""
    from ..workload.profiles import BUILTIN, get_profile
    from ..workload.profiles.profile import FORMAT as PROFILE_FORMAT
    from ..workload.trace import load_trace

    path = Path(text)
    if text not in BUILTIN and not path.exists():
        raise PolytraceError(f"{text!r} is neither a built-in profile ({', '.join(BUILTIN)}) nor an existing "
                             f"file or folder")
    if text in BUILTIN or (path.is_file() and path.suffix == ".json" and _is_profile_file(path, PROFILE_FORMAT)):
        if max_response_len is not None:
            raise PolytraceError("--max-response-len applies to recorded traces, not to profiles")
        return get_profile(text, drift=drift)
    if drift is not None:
        raise PolytraceError("--drift applies to profiles, not to recorded traces")
    try:
        return load_trace(path, max_response_len=max_response_len)
    except PolytraceError as exc:
        if not path.is_dir() or str(exc).startswith(f"{path}:"):
            raise
        # a file inside the folder failed: say the folder was read as one trace, and why that file broke it
        raise PolytraceError(f"{path}: a folder is read as one trace (every *.jsonl / *.json in it a step file), "
                             f"and {exc}; give a profile or trace file itself, or a folder of one trace's step "
                             "files") from None


def _is_profile_file(path: Path, fmt: str) -> bool:
    try:
        with path.open("rb") as fh:  # the head only: a profile names its format first
            head = fh.read(4096).decode(errors="replace")
    except OSError:
        return False
    return f'"{fmt}"' in head


# --------------------------------------------------------------------------- commands


def cmd_profiles(args) -> int:
    from ..workload.profiles import get_profile, list_profiles

    rows = []
    for name in list_profiles():
        p = get_profile(name)
        c = p.config
        rows.append({"name": name, "kind": p.kind, "prompts_x_n": f"{c.prompts_per_step}x{c.n}",
                     "max_prompt": c.max_prompt_len, "max_response": c.max_response_len,
                     "description": p.description})
    if args.json:
        print_json(rows)
        return 0
    from tabulate import tabulate

    print(tabulate([[r["name"], r["kind"], r["prompts_x_n"], r["max_response"], r["description"]] for r in rows],
                   headers=["profile", "kind", "prompts x n", "max resp", "description"]))
    return 0


def cmd_describe(args) -> int:
    from ..workload.describe import describe, format_describe

    src = load_source(profile_arg(args, "source"), drift=args.drift, max_response_len=args.max_response_len)
    result = describe(src, steps=args.steps, seed=args.seed, include_partial=args.include_partial)
    if args.json:
        print_json(result)
        return 0
    print(format_describe(result, per_step=args.per_step))
    return 0


def cmd_fidelity(args) -> int:
    from ..workload.fidelity import fidelity, format_fidelity
    from ..workload.profiles import get_profile
    from ..workload.trace import load_trace

    profile = get_profile(profile_arg(args, "profile"))
    result = fidelity(profile, load_trace(args.trace, max_response_len=args.max_response_len),
                      replicas=args.replicas, seed=args.seed, include_partial=args.include_partial)
    if args.json:
        print_json(result)
    else:
        print(format_fidelity(result))
    return 0


def cmd_fit(args) -> int:
    from ..workload.profiles import StatedBatch, fit_file

    if not args.out:
        raise PolytraceError("fit: -o/--out PROFILE_JSON is required (the profile file to write)")
    # the trace's name, as --help says (a folder's name, a file's without its suffix), not the output
    # file's: `fit run7/ -o out/mine.json` is profile "run7"
    trace = Path(args.trace)
    name = args.name or (trace.name if trace.is_dir() else trace.name.split(".")[0]) or None
    result = fit_file(args.trace, args.out, name=name, description=args.description,
                      batch=StatedBatch(args.prompts_per_step, args.n, args.max_prompt_len, args.max_response_len),
                      drift=args.drift)
    print(result.summary())
    return 0


def cmd_report(args) -> int:
    from ..report import ReportRun, build_report

    result = build_report(ReportRun(args.profile, args.model, args.gpu, args.gpus), steps=args.steps,
                          seed=args.seed, output_dir=args.out, explain=args.explain, roofline=args.roofline,
                          write=not args.json)
    if args.json:
        print_json(result["data"])
    else:
        print(result["text"])
    return 0
