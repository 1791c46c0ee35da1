"""``polytrace estimate`` and ``polytrace impact``: RL step estimates and what a change in kernel
timings does to them (``validate`` and ``calibrate`` live in ``validate_cmds``)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING

from ._args import add_steps, advanced
from ._args import finite_float as _float
from ._args import nonneg_int as _seed
from ._args import positive_int as _pos_int
from ._io import print_json
from ._settings import add_run_flags, add_set_flag, estimate_settings, run_values, section_group

if TYPE_CHECKING:  # the parser is built without importing compose (numpy) for every command
    from ..stepmodel.result import EstimateResult, ModeComparison

# polytrace.workload.profiles.stated.LENGTHS_SYNTAX (tests/stepmodel/test_compose_stated.py keeps them equal): the
# parser is built without importing the profiles (numpy) for every command
LENGTHS_SYNTAX = "mean=M[,max=L][,total=T][,prompt=P][,shape=PROFILE]"


def register(sub) -> None:
    p = sub.add_parser("estimate", help="per-stage time of RL training steps (estimated, no GPU needed)",
                       description="Estimate rollout, log-prob, reference, critic and update time per RL "
                       "step for a workload profile, a model and a cluster. Every stage is a sum of kernel "
                       "families (gemm, attention, decode, prefill, logprob, packing, optimizer, comm, host), "
                       "each priced from measured kernel timings on that GPU (results/<gpu>/, or --results) "
                       "where present, else at the roofline at assumed efficiencies.")
    c = section_group(p, "cluster")
    c.add_argument("--model", help="model preset (e.g. qwen2.5-7b) or a HF config.json (required unless "
                   "--calibration gives it)")
    c.add_argument("--gpu", help="GPU preset (e.g. h100, a100-80g, h200; required unless --calibration gives it)")
    c.add_argument("--gpus", type=_pos_int, help="GPU count (required unless --calibration gives it)")
    p.add_argument("--profile", default=None, help="workload profile (default dapo-math-32b; with --lengths: the "
                   "shape, default the nearest built-in for the model's task)")
    add_steps(p, default=[0], what="sampled steps to estimate", count_note=True)
    advanced(p.add_argument("--seed", type=_seed, default=0,
                   help="seed of the sampled batches (default 0; same seed, same batches on any machine)"))
    add_run_shape_flags(p)
    m = p.add_argument_group("execution modes")
    m.add_argument("--mode", choices=("sync", "one-step-off", "fully-async"), default="sync",
                   help="sync: rollout and training colocated on all GPUs (default); one-step-off: the rollout "
                   "generates batch k+1 on its own GPUs while the trainer trains on batch k; fully-async: the "
                   "rollout streams samples to the trainer under a staleness bound")
    m.add_argument("--rollout-gpus", type=_pos_int, default=None, metavar="R",
                   help="GPUs of the rollout in the separated modes (default: the best split tried)")
    m.add_argument("--train-gpus", type=_pos_int, default=None, metavar="T",
                   help="GPUs of the trainer in the separated modes; R + T must equal --gpus")
    m.add_argument("--staleness", type=_float, default=None, metavar="S",
                   help="fully-async: the share of a batch the rollout may generate ahead on old weights "
                   "(verl's staleness_threshold; default 0.1; 0: one batch per weight version)")
    m.add_argument("--partial-rollout", action=argparse.BooleanOptionalAction, default=None,
                   help="fully-async: interrupt the sequences in flight at a weight sync and resume them after "
                   "(default on, as verl); --no-partial-rollout waits for them to finish")
    m.add_argument("--updates-per-sync", type=_pos_int, default=None, metavar="K",
                   help="fully-async: local updates per batch before the weights sync (verl's "
                   "trigger_parameter_sync_step; default 4)")
    m.add_argument("--in-flight-updates", action=argparse.BooleanOptionalAction, default=None,
                   help="one-step-off and fully-async: the rollout keeps decoding through the weight sync (NeMo "
                   "RL's grpo.async_grpo.in_flight_weight_updates on a vLLM V1 async engine); default off, as "
                   "verl's recipes stop the rollout for it")
    m.add_argument("--pipelined-sync", action=argparse.BooleanOptionalAction, default=None,
                   help="separated modes: the weight sync gathers each pack of tensors while the previous one is "
                   "broadcast (NeMo RL's packed broadcast); default off (verl: gather, then broadcast)")
    m.add_argument("--checkpoint-engine", action=argparse.BooleanOptionalAction, default=None,
                   help="separated modes: the weight sync's tensors packed into buckets (verl's "
                   "async_training.checkpoint_engine.enable): a MoE's expert tensors cost ~0.05 ms each, not "
                   "0.52 ms; default on in fully-async (verl's default), off in one-step-off")
    m.add_argument("--framework", choices=("verl", "nemo-rl"), default="verl",
                   help="the RL framework's mechanics where they change the cost (polytrace/stepmodel/frameworks.py): "
                   "verl (default; what the priors were fitted on) or nemo-rl (colocated: engine weights and "
                   "optimizer state offloaded around the refit; one-step-off: in-flight updates, pipelined sync); "
                   "the flags above win where given")
    m.add_argument("--compare-modes", action="store_true",
                   help="print sync, one-step-off and fully-async side by side on the same sampled steps")
    add_stated_run_flags(p)
    p.add_argument("--kernels", action="store_true",
                   help="print per stage the seconds of each kernel family, its share of the step and where it "
                   "came from (result file and provider, or roofline), and the Amdahl table")
    advanced(p.add_argument("--results", action="append", metavar="PATH", default=None,
                   help="price measured families from these result files or folders, all of the --gpu "
                   "(repeatable; default: results/<gpu>/, each benchmark's latest run)"))
    advanced(p.add_argument("--provider", action="append", metavar="FAMILY=NAME", default=None,
                   help="what-if: price a measured family (gemm, attention, decode, logprob, packing) with "
                   "another provider's timings, e.g. --provider logprob=torch-eager (repeatable)"))
    advanced(p.add_argument("--speedup", action="append", metavar="FAMILY=X", default=None,
                   help="what-if: make a kernel family X times faster (X > 0; 0.5 = twice as slow), "
                   "e.g. --speedup logprob=1.5 (repeatable)"))
    advanced(p.add_argument("--amdahl", type=_float, default=2.0, metavar="X",
                   help="the speedup of each family in the Amdahl table of --kernels (default 2)"))
    add_set_flag(p)
    p.add_argument("--calibration", default=None, metavar="CAL_JSON",
                   help="scale the stage costs by the scalars of a calibration file (polytrace calibrate), "
                   "refused for another model family; the calibrated run's configuration (model, GPU, GPU count, "
                   "batch, n, TP, lengths) is the default of every flag not given, and each flag that differs "
                   "from it is listed")
    advanced(p.add_argument("--roofline", action="store_true",
                   help="price at the base roofline alone, without the shared physical priors the estimate applies "
                   "by default (polytrace/data/priors.json)"))
    advanced(p.add_argument("--explain", action="store_true", help="also print what the two tail figures answer"))
    p.add_argument("--json", action="store_true", help="print JSON (the breakdown is under summary.kernels)")
    p.set_defaults(func=_estimate)

    i = sub.add_parser("impact", help="what a change in kernel timings does to the RL step time",
                       description="Price the same sampled steps of a workload with the kernel timings of "
                       "BASELINE and of CANDIDATE (result files or folders of one GPU) and print the step-time "
                       "change per stage and in total, with the kernel families that cause it. Kernels only "
                       "one side measured are priced alike on both sides.")
    i.add_argument("baseline", help="baseline result JSON, or a folder of them (e.g. results/baselines/h200.json)")
    i.add_argument("candidate", help="candidate result JSON, or a folder of them (e.g. out/)")
    i.add_argument("--profile", default=None, help="workload profile (default dapo-math-32b)")
    i.add_argument("--model", default=None, help="model preset or HF config.json (default: the profile's model)")
    i.add_argument("--gpu", default=None, help="GPU preset; must be the files' GPU (default: the files' GPU)")
    i.add_argument("--gpus", type=_pos_int, default=None, help="GPU count (default: the profile's)")
    add_steps(i, default=list(range(8)), what="sampled steps to price", count_note=True)
    advanced(i.add_argument("--seed", type=_seed, default=0, help="sampling seed of the steps (default 0)"))
    add_run_shape_flags(i)
    add_stated_run_flags(i)
    add_set_flag(i)
    advanced(i.add_argument("--roofline", action="store_true",
                   help="price the step at the base roofline alone, without the shared priors (a shorter step: "
                   "each kernel a larger share of it)"))
    out = i.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument("--markdown", action="store_true", help="print Markdown for a pull-request comment")
    i.set_defaults(func=_impact)


LENGTHS_HELP = ("response lengths stated by their mean: mean=M tokens, max=L the cap (default --max-response-len, "
                "else the shape's), total=T the sequence cap (prompt and response together, vLLM's "
                "max_model_len: each response within what its prompt leaves), prompt=P the mean prompt, "
                "shape=PROFILE whose spread, pile-up at the cap and group correlation are kept (default "
                "--profile, else the nearest built-in for the model's task)")


# The run settings each group of flags states (their flags generated from polytrace.run.spec)
RUN_SHAPE = ("rollout_tp", "strategy", "train_tp", "train_pp", "algorithm", "use_ref", "prompts",
             "micro_batch_tokens", "max_prompt_len", "max_response_len", "mem_fraction", "n", "ppo_mini_batch",
             "lora_rank", "param_offload", "optimizer_offload", "cpu_optimizer", "cpu_optimizer_overlap",
             "generated_share", "gen_batch", "gen_batches")
STATED_RUN = ("responses_per_step", "train_batch", "train_ep", "train_cp", "train_vpp", "rollout_ep",
              "rollout_precision", "train_precision", "engine", "async_scheduling")


def add_run_shape_flags(p) -> None:
    """The run's shape: layouts, batch, caps, memory share, LoRA and offload (``estimate``,
    ``impact``)."""
    add_run_flags(p, RUN_SHAPE)


def run_shape_kw(args) -> dict:
    """The run settings of the flags ``add_run_shape_flags`` adds."""
    return run_values(args, RUN_SHAPE)


def add_stated_run_flags(p, prefix: str = "") -> None:
    """A run stated as frameworks state it: lengths by their mean, the batch in responses, the
    MoE and long-context layouts (``estimate``, ``calibrate --stage-times``)."""
    g = p.add_argument_group("a run stated by its averages and layout")
    g.add_argument("--lengths", default=None, metavar=LENGTHS_SYNTAX,
                   help=prefix + LENGTHS_HELP)
    add_run_flags(g, STATED_RUN, prefix=prefix)


def stated_run(args, model=None) -> tuple[object, dict]:
    """(the profile, the run settings) of the flags ``add_stated_run_flags`` adds."""
    return stated_profile(args, model), run_values(args, STATED_RUN)


def stated_profile(args, model=None):
    """``--profile`` (default dapo-math-32b), or with ``--lengths`` its shape rescaled."""
    from ..workload.profiles import DEFAULT_PROFILE

    if getattr(args, "lengths", None) is None:
        return args.profile or DEFAULT_PROFILE
    from ..stepmodel.workloads import stated_lengths_profile

    return stated_lengths_profile(args.lengths, profile=args.profile, model=model if model is not None else args.model,
                                  max_response_len=getattr(args, "max_response_len", None))
def _calibrated_run(args) -> tuple[list[str], dict | None]:
    """With --calibration: the flags not given take the calibrated run's values (``args`` updated);
    the lines listing where given flags differ from that run."""
    if not args.calibration:
        missing = [f for f in ("--model", "--gpu", "--gpus") if getattr(args, f[2:]) is None]
        if missing:
            from ..errors import PolytraceError

            raise PolytraceError(f"estimate: the following arguments are required: {', '.join(missing)} (or "
                                 "--calibration CAL_JSON, whose calibrated run gives them)")
        return [], None
    from ..calibrate.files import load
    from ..calibrate.rundefaults import apply_run_defaults

    doc = load(args.calibration)
    given = getattr(args, "given", set())
    values, differences = apply_run_defaults(vars(args), given, doc)
    args.from_calibration = calibration_keys(doc, given)
    for dest, value in values.items():
        setattr(args, dest, value)
    longest = (args.max_prompt_len or 0) + (args.max_response_len or 0)
    if "micro_batch_tokens" not in given and args.micro_batch_tokens and args.micro_batch_tokens < longest:
        # the run's budget cannot hold the longer sequences asked for: the default budget instead
        differences.append(f"--micro-batch-tokens auto (the calibrated run's {args.micro_batch_tokens} is below "
                           f"the {longest}-token sequences asked for)")
        args.micro_batch_tokens = None
    return differences, doc


def calibration_keys(doc: dict, given: set[str]) -> dict[str, str]:
    """Flag -> ``key = value`` in the calibration file, for each setting the file gave (a flag the user
    left out): an error about that setting names the file's key, not a flag never typed."""
    from ..calibrate.rundefaults import fields, flag_of, run_defaults

    decls = fields()
    out = {}
    for dest, value in run_defaults(doc).items():
        if dest in given:
            continue
        key = f"config.{decls[dest].config_key}" if dest in decls else dest
        out[flag_of(dest)] = f"{key} = {value}"
    return out


def blame_calibration(args, message: str) -> str:
    """``message`` prefixed with the calibration file and the keys of the flags it names that the file
    set (``--rollout-tp 3 does not divide --gpus 8`` when neither flag was typed)."""
    import re

    taken = getattr(args, "from_calibration", None)
    if not taken or message.startswith("--calibration"):
        return message
    named = [taken[f] for f in dict.fromkeys(re.findall(r"--[a-z][a-z0-9-]*", message)) if f in taken]
    return f"--calibration {args.calibration} ({', '.join(named)}): {message}" if named else message


def _unused_flags(args) -> None:
    """A flag the chosen output or mode does not use is an error naming it, not dropped unsaid."""
    from ..errors import PolytraceError

    given = getattr(args, "given", set())
    if args.compare_modes and "mode" in given:
        raise PolytraceError(f"--compare-modes prices sync, one-step-off and fully-async side by side: drop --mode "
                             f"{args.mode} (or --compare-modes)")
    if "amdahl" in given and not args.kernels:
        raise PolytraceError("--amdahl sets the speedup of the Amdahl table --kernels prints: add --kernels")


def _estimate(args) -> int:
    from ..calibrate.files import compare_calibrated, estimate_calibrated
    from ..stepmodel.modes import compare_modes, mode_estimate
    from ..stepmodel.pricing import parse_assignments

    _unused_flags(args)
    differences, cal_doc = _calibrated_run(args)
    # said once the estimate stands (on stderr, before any table): a refusal (--model of another
    # family than the calibration's) is then its one-line error alone
    notes = [f"note: differs from the calibrated run: {line}" for line in differences]
    profile, stated_kw = stated_run(args)
    kw = dict(steps=args.steps, seed=args.seed, **run_shape_kw(args), results=args.results,
              providers=parse_assignments(args.provider, "--provider"),
              speedups=parse_assignments(args.speedup, "--speedup"), **stated_kw)
    kw.update(estimate_settings(args, kw))
    split = dict(rollout_gpus=args.rollout_gpus, train_gpus=args.train_gpus, staleness=args.staleness,
                 partial_rollout=args.partial_rollout, updates_per_sync=args.updates_per_sync,
                 in_flight_updates=args.in_flight_updates, pipelined_sync=args.pipelined_sync,
                 checkpoint_engine=args.checkpoint_engine)
    from ..stepmodel.frameworks import apply_framework

    framework = apply_framework(args.framework, "compare" if args.compare_modes else args.mode, kw, split)
    if framework.name != "verl" and not args.json:
        print(f"framework: {framework.name}: {framework.summary}")
    where = (profile, args.model, args.gpu, args.gpus)
    lengths_line = _lengths_line(profile)
    if not args.calibration and not args.roofline:
        from ..stepmodel.scalars import Scalars

        kw["calibration"] = Scalars.priors()  # the shared physical priors (polytrace/data/priors.json)
    if args.compare_modes:
        if lengths_line and not args.json:
            print(lengths_line)
        cmp = (compare_calibrated(args.calibration, *where, **split, **kw) if args.calibration
               else compare_modes(*where, **split, **kw))
        for line in notes:
            print(line, file=sys.stderr)
        if not args.calibration and not args.roofline:
            _device_note(args.gpu)
        return _print_comparison(cmp, args)
    kw.update(split, mode=args.mode, amdahl=args.amdahl if args.kernels else None)
    result = (estimate_calibrated(args.calibration, *where, **kw) if args.calibration
              else mode_estimate(*where, **kw))
    for line in notes:
        print(line, file=sys.stderr)
    if lengths_line and result.lengths is None:
        result.lengths = {**profile.summary(), "line": lengths_line}
    result.framework = framework.name
    if cal_doc is not None:
        from ..calibrate.rundefaults import copied_constants

        used = {st.name for st in result.stages}
        copied = copied_constants(cal_doc, used)
        result.calibration = {**result.calibration, "differs_from_run": differences, "copied_constants": copied}
        for line in copied:
            print(f"note: {line}", file=sys.stderr)
    for w in result.warnings:  # on stderr, so --json output stays one JSON document
        print(f"warning: {w}", file=sys.stderr)
    # what the steps' pricing assumed (multi-turn tool waits, DAPO's generation batches), once each
    for line in dict.fromkeys(n for row in (result.rows or []) for n in row.get("notes", ())):
        print(f"note: {line}", file=sys.stderr)
    if not args.calibration and not args.roofline:  # priced with the priors; the JSON: gpu.efficiency_priors
        _device_note(args.gpu)
    if args.json:
        print_json(result.to_json())  # docs/json-schema.md
        return 0
    if lengths_line:
        print(lengths_line)
        for note in profile.notes:
            print(f"note: {note}")
    if args.mode != "sync":
        from ..stepmodel.modes_text import mode_lines

        print("\n".join(mode_lines(result)))
        return 0
    _print_sync(result, args)
    return 0


def _device_note(gpu: str) -> None:
    """On stderr, where a GPU off the corpus takes its efficiency priors from (``stepmodel/devices.py``)."""
    from ..run.hardware import get_gpu
    from ..stepmodel.devices import note

    line = note(get_gpu(gpu))
    if line:
        print(f"note: {line}", file=sys.stderr)


def _run_line(result: EstimateResult) -> str:
    """The estimate's first line: the run as priced (model, GPUs, layouts, precisions, the engine's
    setting (``engines.engine_phrase``), batch)."""
    from ..stepmodel.dynamic_sampling import samples_apart
    from ..stepmodel.engines import engine_phrase

    s = result.setting
    layout = "".join(f" {k} {s(f)}" for k, f in (("EP", "rollout_ep"),) if s(f, 1) > 1)
    if s("strategy") == "megatron":
        layout += " | train" + "".join(f" {k} {s(f)}" for k, f in (("TP", "train_tp"), ("PP", "train_pp"),
                                                                   ("CP", "train_cp"), ("EP", "train_ep"),
                                                                   ("VPP", "train_vpp")) if s(f, 1) > 1)
    # an FP8 side, said where it is (bf16, the default, is not)
    precision = "".join(f" | {side} {s(f)}" for side, f in (("rollout", "rollout_precision"),
                                                           ("train", "train_precision")) if s(f, "bf16") != "bf16")
    launches, loop = engine_phrase(s("eager", False), s("engine"), s("async_scheduling", False)).split(" | ")
    # DAPO's dynamic sampling: the generation batches beside the prompts trained on
    gen_batch, gen_batches = s("gen_batch_prompts", None), s("gen_batches", 1.0)
    sampled = (f" (generated: {gen_batches:g} x {gen_batch or s('prompts_per_step')} prompts)"
               if samples_apart(gen_batch, gen_batches) else "")
    return (f"{result.profile} | {s('model')} | {s('n_gpus')} x {s('gpu')} | rollout TP {s('rollout_tp')}{layout}, "
            f"{launches}{precision} | {loop} | {s('strategy')} | {s('algorithm')} | {s('prompts_per_step')} prompts x "
            f"{s('n')}{sampled} | micro-batch {s('micro_batch_tokens')} tokens")


def _print_sync(result: EstimateResult, args) -> None:
    """The colocated estimate's text: the run, memory, the per-step table, the calibrated range,
    idle causes, what-ifs and (``--kernels``) the kernel families."""
    from tabulate import tabulate

    from ..stepmodel.breakdown import (
        amdahl_lines,
        grouped_source_lines,
        kernel_table,
        priors_constant_named,
        what_if_lines,
    )
    from ..stepmodel.estimate import TAIL_FIGURES_NOTE
    from ..stepmodel.modes_text import idle_lines

    print(_run_line(result))
    print(f"source: {result.source}")
    for line in format_memory(result.memory):
        print(line)
    stages = [st.name for st in result.stages]
    table = [[r.step, *(f"{r.stages_s[s]:.1f}" for s in stages), f"{r.step_s:.1f}",
              f"{r.tokens_per_s_per_gpu:.0f}", f"{100 * r.rollout_tail_share:.1f}%",
              f"{100 * r.rollout_engine_wait_share:.1f}%", f"{100 * r.trainer_rank_wait_share:.1f}%"]
             for r in result.steps]
    print(tabulate(table, headers=["step", *(f"{s} s" for s in stages), "step s", "tok/s/GPU",
                                   "rollout tail", "engines wait", "ranks wait"]))
    rng, guarded = result.range, result.guarded
    if rng is not None:  # a calibrated estimate: what its window could not identify
        lo, hi = rng.step_s
        why = (f" (the window could not split constant from per-token cost in {', '.join(rng.unidentified)})"
               if rng.unidentified else "")
        # calibrate/ranges.guard: the calibrated step stands, the guarded one is said beside it
        toward = (f"; toward the priors where the range is past 2x: {guarded.step_s:.1f} s"
                  if guarded is not None and guarded.notes else "")
        print(f"calibrated step: {result.mean_step_s:.1f} s, range {lo:.1f}-{hi:.1f} s{why}{toward}")
    print("\n".join(idle_lines(result.summary)))
    if args.explain:
        print(textwrap.fill(TAIL_FIGURES_NOTE, 100))
    for line in what_if_lines(result.summary):
        print(line)
    if args.kernels:
        summary = priors_constant_named(result.summary)  # the text only: --json keeps the family's key
        print(f"\nkernel families (estimated, mean over {len(result.rows)} sampled steps):")
        print(kernel_table(summary))
        print("\nwhere each family's time comes from:")
        for line in grouped_source_lines(summary):
            print(f"  {line}")
        print(f"\nAmdahl: the step with one kernel family {args.amdahl:g}x faster (share = the most it can save):")
        print(amdahl_lines(summary))


def _lengths_line(profile) -> str:
    if not hasattr(profile, "stated"):
        return ""
    from ..workload.profiles.stated import describe

    return describe(profile)


def _print_comparison(cmp: ModeComparison, args) -> int:
    results = cmp.results  # mode -> EstimateResult
    for name, res in results.items():
        for w in res.warnings:
            print(f"warning: {name}: {w}", file=sys.stderr)
    if args.json:
        print_json(cmp.to_json())  # docs/json-schema.md
        return 0
    from ..stepmodel.modes_text import compare_table, stream_settings

    sync = results["sync"]
    s = sync.setting
    print(f"{sync.profile} | {s('model')} | {s('n_gpus')} x {s('gpu')} | {s('prompts_per_step')} prompts x {s('n')} "
          f"| steady-state step per batch, estimated")
    print(compare_table(cmp))
    fa = results["fully-async"].mode_block
    print(f"fully-async: {stream_settings(fa)}; separated splits: "
          + ("as given" if fa["split"] == "given" else "the best of the splits tried (--rollout-gpus to fix one)"))
    return 0


def _impact(args) -> int:
    from ..stepmodel.impact import format_impact, impact

    # the run the kernels' change is priced on: its lengths and shape, as estimate takes them
    # (without --lengths the profile stays unset: the default workload's, with its model)
    stated_profile_, stated_kw = stated_run(args)
    profile = stated_profile_ if args.lengths is not None else args.profile
    kw = dict(run_shape_kw(args), **stated_kw)
    kw.update(estimate_settings(args, kw))
    res = impact(args.baseline, args.candidate, profile=profile, model=args.model, gpu=args.gpu,
                 gpus=args.gpus, steps=args.steps, seed=args.seed, roofline=args.roofline, **kw)
    if not args.json and _lengths_line(profile):
        print(_lengths_line(profile))
    if args.json:
        print_json(res.to_json())
    else:
        print(format_impact(res, markdown=args.markdown))
    return 0


def format_memory(mem: dict) -> list[str]:
    """The per-GPU memory lines of ``polytrace estimate`` (GB, estimated)."""
    st = mem["training_state"]
    parts = {"bf16 weights": 0.0, "fp32 master": 0.0, "Adam": 0.0, "grads": 0.0, "ref": 0.0}
    for k, v in st.items():
        key = ("ref" if k.startswith("ref") else "bf16 weights" if k.endswith("weights_bf16")
               else "fp32 master" if k.endswith("master_fp32") else "Adam" if k.endswith("adam_moments")
               else "grads")
        parts[key] += v
    detail = ", ".join(f"{k} {v:.1f}" for k, v in parts.items() if v > 0)
    gpu = mem["gpu_bytes"]
    return [
        f"memory per GPU (estimated, GB of {gpu:.0f}): training: state {mem['training_state_total']:.1f} "
        f"({detail}) + activations {mem['activations']:.1f} ({mem['activation_tokens']} tokens) "
        f"= {mem['train_peak']:.1f}",
        f"  rollout: trainer kept {mem['rollout_resident']:.1f} + weights {mem['rollout_weights']:.1f} + reserve "
        f"{mem['engine_reserve']:.1f} + KV cache {mem['kv_cache']:.1f} = {mem['rollout_peak']:.1f}; "
        f"KV capacity {mem['kv_capacity_tokens']:,} tokens per engine ({mem['kv_bytes_per_token'] / 1024:.0f} KiB "
        f"per token per GPU)",
    ]
