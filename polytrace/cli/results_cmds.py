"""``polytrace results ls|show|store|set-baseline``, ``polytrace gate``, ``polytrace plot``,
``polytrace tune``: the results store, the regression gate, plots and tuning sessions."""

from __future__ import annotations

import sys

from ..errors import PolytraceError
from ._args import add_out, deprecated, nonneg_int, positive_int, positive_int_at_most, probability, threshold_fraction
from ._args import finite_float as _float

# runs on each side of a change point: a window wider than this is a typo, not a history
_window = positive_int_at_most(1000, "runs")


def register(sub) -> None:
    results = sub.add_parser("results", help="list, show, store result files and set baselines")
    rsub = results.add_subparsers(dest="results_command", metavar="ACTION")
    rsub.required = True

    p = rsub.add_parser("ls", help="list result, baseline and tuning files")
    p.add_argument("--root", default=None, help="results folder (default: $POLYTRACE_RESULTS_DIR or ./results)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_ls)

    p = rsub.add_parser("show", help="table of one result file: time, TFLOP/s, GB/s, %% of peak per provider")
    p.add_argument("file", help="result JSON (or a folder of them, merged)")
    p.add_argument("--brief", action="store_true", help="one row per kernel, mode and provider (trace-weighted)")
    p.add_argument("--json", action="store_true", help="print JSON rows")
    p.set_defaults(func=_show)

    p = rsub.add_parser("store", help="copy result files into <root>/<gpu-slug>/<date>_<commit>_<suite>.json")
    p.add_argument("files", nargs="+", help="result JSON files (one per suite)")
    p.add_argument("--root", default=None, help="results folder (default: ./results)")
    p.add_argument("--suite", default=None, help="suite name for the file name (default: from the benchmarks)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    p.add_argument("--allow-cpu", action="store_true", help="accept CPU-interpreter results (tests only)")
    p.add_argument("--allow-throttled", action="store_true", help="store a run marked throttled (clock below 90%% "
                   "of max or another process on the GPU) anyway")
    deprecated(p, "--force", use="--allow-throttled", dest="allow_throttled", kind="store_true")
    p.set_defaults(func=_store)

    p = rsub.add_parser("set-baseline", help="merge one run's result files into <root>/baselines/<gpu-slug>.json")
    p.add_argument("files", nargs="+", help="result JSON files or folders of one run")
    p.add_argument("--root", default=None, help="results folder (default: ./results)")
    p.add_argument("--allow-cpu", action="store_true", help="accept CPU-interpreter results (tests only)")
    p.add_argument("--allow-throttled", action="store_true", help="accept a run marked throttled (clock below "
                   "90%% of max or another process on the GPU)")
    deprecated(p, "--force", use="--allow-throttled", dest="allow_throttled", kind="store_true")
    p.set_defaults(func=_set_baseline)

    p = rsub.add_parser("history", help="a benchmark's time across the stored runs, change points and the "
                                         "version changes that coincide with them")
    p.add_argument("--root", default=None, help="results folder (default: $POLYTRACE_RESULTS_DIR or ./results)")
    p.add_argument("--gpu", default=None, help="GPU slug, e.g. h200 (default: every GPU, one series each; "
                                               "'cpu' shows CPU-interpreter runs)")
    p.add_argument("-k", dest="keyword", metavar="EXPR", default=None,
                   help="select benchmark ids as pytest -k does: words (substrings) with and/or/not, parentheses")
    p.add_argument("--window", type=_window, default=5,
                   help="runs on each side of a candidate change point (default 5, at least 3)")
    p.add_argument("--alpha", type=probability, default=0.01,
                   help="significance level of the change-point test (default 0.01)")
    p.add_argument("--threshold", type=threshold_fraction, default=0.05,
                   help="smallest change of level that counts: 5%% or 0.05 (default 5%%)")
    add_out(p, old=("--plot",), metavar="DIR", default=None, help="write one PNG per series into DIR")
    p.add_argument("--max-plots", type=positive_int, default=20, help="plot at most this many series (default 20)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_history)

    p = sub.add_parser("gate", help="regression gate: Mann-Whitney U on raw rounds + median threshold, "
                                    "weighted geomean per kernel, mode and provider (exit 0 pass, 1 regression, "
                                    "2 refused, 3 inconclusive)",
                       description="Compare two result files benchmark by benchmark. Each gated benchmark is a "
                                   "regression (Mann-Whitney U p < alpha AND the median slowed beyond the "
                                   "threshold), unchanged (the change's 1 - alpha interval lies within "
                                   "+-threshold) or inconclusive (neither: the report states the rounds per side "
                                   "that would decide; get them with POLYTRACE_BENCH_ROUNDS=N or pytest "
                                   "--benchmark-min-rounds=N when running the suites). The weighted geometric mean "
                                   "per kernel, mode and provider is judged alike. Exit 0 pass, 1 regression, "
                                   "2 refused or an error, 3 inconclusive.")
    p.add_argument("baseline", help="baseline result JSON, or a folder of one run's files")
    p.add_argument("candidate", help="candidate result JSON, or a folder of one run's files")
    p.add_argument("--threshold", type=threshold_fraction, default=0.05,
                   help="median slowdown that counts: 5%% or 0.05 (default 5%%); a bare number above 1 is refused")
    p.add_argument("--alpha", type=probability, default=0.002,
                   help="significance level of the U test and of the aggregates' intervals (default 0.002)")
    p.add_argument("--allow-cpu", action="store_true", help="compare CPU-interpreter timings (a code-path check, "
                   "not performance)")
    p.add_argument("--compare-refused", dest="force", action="store_true", help="compare even when the inputs are "
                   "refused (different GPUs, a throttled run, changed workloads)")
    deprecated(p, "--force", use="--compare-refused", dest="force", kind="store_true")
    p.add_argument("--gate-all", action="store_true", help="gate torch and peer providers too (default: ours only)")
    p.add_argument("--fail-on-missing", action="store_true", help="fail when a baseline benchmark is missing")
    p.add_argument("--all", action="store_true", help="text output lists unchanged benchmarks too")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="on refused inputs, print the report's table too (default: the reason alone, on stderr)")
    add_out(p, old=("--plot",), metavar="DIR", default=None, help="also write the per-benchmark ratio plot into DIR")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument("--markdown", action="store_true", help="print Markdown for a pull-request comment")
    p.set_defaults(func=_gate)

    p = sub.add_parser("plot", help="PNG plots: throughput vs shape per provider with the roofline; "
                                    "gate ratios with --baseline")
    p.add_argument("results", nargs="+", help="result JSON files or folders")
    p.add_argument("-o", "--out", required=True, help="folder for the PNG files")
    p.add_argument("--baseline", default=None, help="also plot each result's per-benchmark ratios against this")
    p.set_defaults(func=_plot)

    from ..measure.tuning.tunables import tunable_names

    p = sub.add_parser("tune", help="search a kernel's launch configs over shape buckets of a profile",
                       description="Search a kernel's launch configs (blocks, warps, stages) over the shape "
                       "buckets of a workload profile and write the best per bucket, which the kernel reads "
                       "at launch. Needs a CUDA GPU; on a CPU-only machine --allow-cpu exercises the code path "
                       "in the Triton interpreter (timings there are not performance).")
    # choices: an unknown kernel is reported while parsing, before a missing --profile
    p.add_argument("kernel", choices=tunable_names(), metavar="KERNEL",
                   help=f"tunable kernel: {', '.join(tunable_names())}")
    p.add_argument("--profile", required=True, help="workload profile the shapes are drawn from "
                   "(a built-in name, e.g. dapo-math-32b, or a fitted profile JSON)")
    p.add_argument("--budget-s", type=_float, default=120.0, help="search time budget in seconds (default 120)")
    p.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of the sampled batches (default 0; same seed, same batches on any machine)")
    add_out(p, metavar="DIR", default=None, help="tuning root (default: results/tuning on a GPU, out/tuning for "
            "CPU-interpreter runs)")
    p.add_argument("--model", default=None, help="model preset whose vocab / heads / hidden size the shapes use "
                                                 "(default: the profile's model)")
    p.add_argument("--max-buckets", type=positive_int, default=None, help="tune at most this many buckets")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    deprecated(p, "--no-progress", use="-q/--quiet", dest="quiet", kind="store_true")
    p.add_argument("--json", action="store_true", help="print the written file's content")
    p.add_argument("--ray", metavar="auto|local|ADDRESS", default=None,
                   help="spread the trials (bucket, config) over a Ray cluster, one worker per GPU: 'local' starts "
                        "Ray here, 'auto' joins this machine's cluster, or the head's HOST:PORT")
    p.add_argument("--workers", type=positive_int, default=None, help="with --ray: workers at once (default: "
                   "every GPU; with --allow-cpu on a cluster without GPUs, every CPU)")
    p.add_argument("--allow-cpu", action="store_true", help="without a CUDA GPU, run the trials in the Triton "
                   "interpreter (a code-path check; timings are not performance); with --ray on a cluster without "
                   "GPUs, one worker per CPU")
    p.add_argument("--max-retries", type=nonneg_int, default=3,
                   help="with --ray: times a lost worker is restarted and its trial retried (default 3)")
    p.set_defaults(func=_tune)


def _ls(args) -> int:
    from ..measure.results import format_listing, list_results

    entries = list_results(args.root)
    if args.json:
        from ._io import print_json

        print_json([{**e.__dict__, "path": str(e.path)} for e in entries])
    else:
        print(format_listing(entries))
    return 0


def _show(args) -> int:
    from ..measure.results import format_show, load_result, show_rows
    from ..measure.results.store import brief_rows, format_brief

    result = load_result(args.file)
    if args.json:
        from ._io import print_json

        print_json({"path": result.path, "gpu_name": result.gpu_name, "measured_on": result.measured_on,
                    "commit": result.commit, "rows": brief_rows(result) if args.brief else show_rows(result)})
    elif args.brief:
        print(format_brief(result))
    else:
        print(format_show(result))
    return 0


def _store(args) -> int:
    from ..measure.results import store_result

    if args.suite and len(args.files) > 1:
        raise PolytraceError("--suite: give one file when naming its suite")
    for f in args.files:
        print(store_result(f, args.root, suite=args.suite, overwrite=args.overwrite, allow_cpu=args.allow_cpu,
                           force=args.allow_throttled))
    return 0


def _set_baseline(args) -> int:
    from ..measure.results import set_baseline

    print(set_baseline(args.files, args.root, allow_cpu=args.allow_cpu, force=args.allow_throttled))
    return 0


def _history(args) -> int:
    from ..measure.results.history import format_history, load_history, plot_history

    h = load_history(args.root, gpu=args.gpu, keyword=args.keyword, window=args.window, alpha=args.alpha,
                     threshold=args.threshold)
    paths = plot_history(h, args.out, max_plots=args.max_plots) if args.out else []
    if args.json:
        from ._io import print_json

        print_json({**h.to_dict(), "plots": [str(p) for p in paths]})
    else:
        print(format_history(h))
        for path in paths:
            print(f"plot: {path}")
    return 0


def _gate(args) -> int:
    from ..measure.results import compare, load_result
    from ..measure.results.gate import GatePolicy, Rule

    if args.out:  # a bad -o fails before the report is printed, not after
        from ..measure.results.plots import check_output_dir

        check_output_dir(args.out, "-o")
    baseline, candidate = load_result(args.baseline), load_result(args.candidate)
    report = compare(baseline, candidate, rule=Rule(args.threshold, args.alpha),
                     policy=GatePolicy(force=args.force, allow_cpu=args.allow_cpu, gate_all=args.gate_all,
                                       fail_on_missing=args.fail_on_missing))
    if report.refusals and not report.forced:
        # the reason first, on stderr, one line (56 lines of table on stdout hid it on line 6);
        # JSON and Markdown stay whole on stdout for the CI that reads them
        more = f" (and {len(report.refusals) - 1} more: --verbose)" if len(report.refusals) > 1 else ""
        print(f"polytrace: error: gate refused: {report.refusals[0]}{more}; --compare-refused compares anyway",
              file=sys.stderr)
        if args.json or args.markdown or args.verbose:
            print(_render_gate(args, report, None))
        return 2
    step = _step_time(report, baseline, candidate)
    if step:
        report.impact.append(step["line"])  # rendered right under the verdict, kept in the JSON's "impact"
    print(_render_gate(args, report, step))
    if report.exit_code == 2 and report.errors:  # what the gate cannot vouch for, said where errors go
        more = f" (and {len(report.errors) - 1} more in the report)" if len(report.errors) > 1 else ""
        print(f"polytrace: error: gate {args.baseline} vs {args.candidate}: {report.errors[0]}{more}", file=sys.stderr)
    if args.out and report.exit_code != 2:
        from ..measure.results import plot_gate

        path = plot_gate(report, args.out)
        if not (args.json or args.markdown):
            print(f"plot: {path}")
    return report.exit_code


def _render_gate(args, report, step: dict | None) -> str:
    from ..measure.results import format_markdown, format_text
    from ._io import json_text

    if args.json:
        return json_text({**report.to_dict(), **({"step_time": step} if step else {})})
    if args.markdown:
        return format_markdown(report)
    return format_text(report, show_all=args.all)


def _step_time(report, baseline, candidate) -> dict | None:
    """What the kernel changes cost on the default workload (``polytrace.stepmodel.impact``), for
    the line under the verdict; none for inputs the gate refused."""
    if report.exit_code == 2:
        return None
    from ..stepmodel.impact import step_time_line

    res = step_time_line(baseline, candidate)
    return {"line": res["line"], "step_change": res["step_change"]}


def _plot(args) -> int:
    from ..measure.results import plot_files

    for path in plot_files(args.results, args.out, baseline=args.baseline):
        print(path)
    return 0


def _interpret_on_cpu(may_reexec: bool) -> None:
    """``tune --allow-cpu`` without a CUDA GPU: switch the Triton interpreter on for this process.
    Triton reads ``TRITON_INTERPRET`` when a kernel is decorated (at its module's import), so the
    variable is set before any kernel module is imported; were triton already imported, the command
    is run again in a fresh interpreter with the variable set (only when it came from the command
    line: a caller of ``main(argv)`` in-process gets the variable to set instead)."""
    import os

    import torch

    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET"):
        return
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
        return
    if not may_reexec:  # too late for this process: the kernels were decorated compiled
        raise PolytraceError("tune --allow-cpu: triton was imported before the interpreter could be switched on; "
                             "set TRITON_INTERPRET=1 in the environment")
    os.execve(sys.executable, [sys.executable, "-m", "polytrace", *sys.argv[1:]],
              {**os.environ, "TRITON_INTERPRET": "1"})


def _tune(args) -> int:
    from ..measure.tuning import session as tune

    if args.allow_cpu and not args.ray:
        _interpret_on_cpu(getattr(args, "from_command_line", False))

    session = tune.run_session(args.kernel, target=tune.TuneTarget(args.profile, args.model, args.seed,
                                                                   args.max_buckets),
                               budget_s=args.budget_s, root=args.out, progress=not args.quiet,
                               cluster=tune.ClusterSpec(args.ray, args.workers, args.allow_cpu, args.max_retries))
    if args.json:
        from ._io import print_json

        print_json(session.data)
    else:
        print(session.summary())
    return 0
