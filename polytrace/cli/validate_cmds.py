"""``polytrace validate`` and ``polytrace calibrate``: the step model checked on real logs, and
calibrated once for ``estimate --calibration``."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from ..run.spec import LOG_OVERRIDES, declarations
from ..wording import counted
from ._args import add_out
from ._args import positive_int as _pos_int
from ._io import print_json
from ._settings import add_run_flags, add_set_flag, estimate_settings, given_flags, parsed_settings, run_values

# a declaration's kind -> the type of its LOG override flag (always optional: the log may state it)
_LOG_TYPES = {"text": str, "count": _pos_int}
# what the flag says beyond its declaration's help, for validate and calibrate LOG
# estimate's "(default: the profile's)": a log's own value is the default here
_DEFAULT_SAID = re.compile(r"\s*\(default:[^)]{0,80}\)")
_LOG_HELP = {"gpu": "; checked against the device names the log shows (none shown: a100-80g, with a note)"}


def _log_config_flags(p) -> None:
    """The flags that state what a log does not (shared by validate and calibrate LOG): the LOG
    overrides generated from their RunSpec declarations, then the companion files and timers."""
    decls = declarations()
    for name in LOG_OVERRIDES:
        d = decls[name]
        p.add_argument(d.flag, dest=d.argument, type=_LOG_TYPES[d.kind], default=None, metavar=d.metavar,
                       help=f"{_DEFAULT_SAID.sub('', d.help)}, when the log does not state it{_LOG_HELP.get(name, '')}")
    # companion files and timer names (a run's wandb/Hydra files, a custom rollout timer)
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="companion file of the run, repeatable: wandb config.yaml / wandb-metadata.json, Hydra "
                   "overrides.yaml / config.yaml, or a README / script holding the launch command")
    p.add_argument("--stage", action="append", default=[], metavar="STAGE=TIMER",
                   help="read a custom timer as a stage, repeatable (gen=timing_s/get_batch_rollout_with_filtering)")
    p.add_argument("--calibrate-steps", type=_pos_int, default=10,
                   help="calibrate on this many first usable steps (default 10)")
    add_set_flag(p)


def register(sub) -> None:
    v = sub.add_parser("validate", help="check step estimates against a real verl log",
                       description="Calibrate the named scalars on the first K steps of a verl log (console or "
                       "wandb CSV; warm-up, validation/checkpoint spikes and stalls are left out and named) and "
                       "predict every later step from its logged length statistics; report accuracy per stage "
                       "and for the step, next to the naive predictor (the calibration steps' mean).")
    v.add_argument("log", help="verl console log, wandb CSV export, or wandb run folder (files/output.log)")
    _log_config_flags(v)
    v.add_argument("--calibrate-on", default=None, metavar="OTHER_LOG",
                   help="calibrate on all steps of another log of the same model and cluster (e.g. a GRPO run "
                   "to predict a PPO run); --gpu applies to both")
    v.add_argument("--zero-shot", action="store_true",
                   help="score the shared priors on the log without fitting anything to it (per stage and for the "
                   "step: predicted / actual, accuracy, and the base roofline beside)")
    v.add_argument("--fail-on-goals", action="store_true",
                   help="exit 1 when an accuracy goal is missed (for CI; default: report and exit 0)")
    v.add_argument("--json", action="store_true", help="the full result as JSON")
    v.set_defaults(func=_validate)

    c = sub.add_parser("calibrate", help="fit the step model's scalars once, for estimate --calibration",
                       description="Write a calibration file: the named scalars (slowdowns per kind of work, "
                       "fixed seconds per stage), the configuration they were fitted for and their provenance. "
                       "From a verl log (its first --calibrate-steps steps, as validate does), or from the "
                       "per-stage averages a dashboard shows (--stage-times, lengths sampled from --profile).")
    c.add_argument("log", nargs="?", default=None,
                   help="verl console log or wandb CSV export (omit with --stage-times)")
    _log_config_flags(c)
    c.add_argument("--stage-times", default=None, metavar="gen=S,old_log_prob=S,update_actor=S[,...]",
                   help="per-stage average seconds of a run known only by its dashboard (ref=, values=, "
                   "update_critic=, step= as the run has them); needs --model, --gpu, --gpus")
    c.add_argument("--profile", default=None,
                   help="with --stage-times: workload profile the lengths are sampled from (default dapo-math-32b; "
                   "with --lengths: the shape)")
    add_run_flags(c, STAGE_TIMES_RUN, prefix="with --stage-times: ", more={"framework": (
        " (default verl): the framework the averages come from; nemo-rl prices its colocated switch (engine "
        "weights and optimizer state offloaded around the refit) instead of leaving it to the fitted constants "
        "(polytrace/stepmodel/frameworks.py)")})
    from .compose_cmds import add_stated_run_flags

    add_stated_run_flags(c, prefix="with --stage-times: ")
    add_out(c, old=("--output",), metavar="CAL_JSON", help="calibration file to write (required; missing folders "
            "are created)")
    c.add_argument("--json", action="store_true", help="print the written file")
    c.set_defaults(func=_calibrate)


# The run settings calibrate takes as flags for --stage-times (a log states them), beside those of
# ``compose_cmds.add_stated_run_flags``; declared once (``polytrace.run.spec``), as estimate's are.
STAGE_TIMES_RUN = ("algorithm", "use_ref", "ppo_mini_batch", "lora_rank", "param_offload", "optimizer_offload",
                   "strategy", "train_tp", "train_pp", "framework")
# ... and those of them, with the stated-run flags, that calibrating a LOG refuses when given
LOG_REFUSED = ("ppo_mini_batch", "lora_rank", "param_offload", "optimizer_offload", "responses_per_step",
               "train_batch", "framework", "strategy", "train_tp", "train_pp", "train_ep", "train_cp", "train_vpp",
               "rollout_ep", "rollout_precision", "train_precision", "engine", "async_scheduling")


# A verl step line (``step:12 - timing_s/gen:...``): a file holding one is a training log, which
# validate reads as LOG, never as a companion of another log.
_STEP_LINE = re.compile(r"(?:^|[\s)\]])step:\d{1,9}\s{1,8}-\s{1,8}\S+:", re.M)
# The roots of the settings a companion file can state (verl's config tree, NeMo RL's policy tree).
_RUN_KEY_ROOTS = ("actor_rollout_ref.", "data.", "trainer.", "critic.", "algorithm.", "reward_model.", "policy.",
                  "grpo.", "cluster.", "ref.", "rollout.", "model.")


# The fit's note when a stage ran faster than the GPU's peak roofline (calibrate/fit.py).
PEAK_BEATEN = "held at the peak roofline"


def check_companions(paths, log) -> None:
    """Refuse a ``--config`` file that is no companion of the run: a training log (another run's,
    or the LOG itself), a polytrace profile or calibration file, or a config stating no setting of
    a run. Each was accepted and changed nothing (issue 38)."""
    import json

    from ..errors import PolytraceError
    from ..logs.companion import MAX_COMPANION_BYTES, read_companion

    for path in map(Path, paths):
        if not path.is_file() or path.stat().st_size > MAX_COMPANION_BYTES:
            continue  # read_companion names what is wrong with it
        text = path.read_text(encoding="utf-8", errors="replace")
        steps = len(_STEP_LINE.findall(text))
        if steps:
            same = log is not None and Path(log).resolve() == path.resolve()
            raise PolytraceError(f"--config {path}: {'is the LOG itself' if same else 'is a training log'} "
                                 f"({counted(steps, 'step line')}), not a companion file of {log}; validate reads "
                                 "one log, given as LOG")
        if path.suffix.lower() == ".json":
            with contextlib.suppress(ValueError):
                doc = json.loads(text)
                fmt = doc.get("format") if isinstance(doc, dict) else None
                if isinstance(fmt, str) and fmt.startswith("polytrace"):
                    raise PolytraceError(f"--config {path}: a polytrace file (format {fmt!r}), not a companion "
                                         "file of the run (wandb config.yaml / wandb-metadata.json, Hydra "
                                         "overrides.yaml, a launch script)")
        comp = read_companion(path)
        if comp.kind in ("config", "wandb-config") and not comp.devices and not any(
                str(k).startswith(_RUN_KEY_ROOTS) for k in comp.config):
            keys = ", ".join(sorted(map(str, comp.config))[:3]) or "none"
            raise PolytraceError(f"--config {path}: states no setting of a training run (keys: {keys}; expected "
                                 f"keys under {', '.join(r.rstrip('.') for r in _RUN_KEY_ROOTS[:4])}, ...)")


def _overrides(args):
    from ..calibrate.logconfig import Overrides
    from ..logs.timers import parse_stage_map

    check_companions(args.config, args.log)

    decls = declarations()
    return Overrides(**{n: getattr(args, decls[n].argument) for n in LOG_OVERRIDES},
                     configs=tuple(args.config), stage_map=parse_stage_map(args.stage),
                     settings=parsed_settings(args))


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _zero_shot(args) -> int:
    from ..calibrate.zeroshot import zero_shot
    from ..errors import PolytraceError

    if args.calibrate_on:
        raise PolytraceError("validate: --zero-shot fits nothing, so --calibrate-on does not apply")
    res = zero_shot(args.log, overrides=_overrides(args))
    if args.json:
        print_json(res.to_json())
        return 0
    from tabulate import tabulate

    c = res.config
    print(f"{res.log} ({res.format}, {res.mode}): {res.steps} steps, zero-shot (shared priors, "
          f"{res.priors.logs} logs, {res.priors.date})")
    print(f"config: {c['model']}, {counted(c['n_gpus'], 'GPU')} ({c['gpu']}), "
          f"{c['prompts_per_step']} prompts x {c['n']}, max {c['max_prompt_len']}+{c['max_response_len']}, "
          f"{c['algorithm']}")
    for note in res.notes:
        print(f"note: {note}")
    rows = [[k, f"{a['mean_predicted_s']:.1f}", f"{a['mean_actual_s']:.1f}", f"{a['ratio']:.2f}x",
             _pct(a["accuracy"]), f"{a['roofline_ratio']:.2f}x", _pct(a["roofline_accuracy"])]
            for k, a in res.accuracy.items()]
    print(tabulate(rows, headers=["stage", "predicted s", "actual s", "pred/actual", "accuracy", "roofline pred/actual",
                                  "roofline accuracy"]))
    return 0


def _validate(args) -> int:
    from ..calibrate.validate import validate

    if args.zero_shot:
        return _zero_shot(args)
    res = validate(args.log, calibrate_steps=args.calibrate_steps, calibrate_on=args.calibrate_on,
                   overrides=_overrides(args))
    missed = res.missed_goals
    code = 1 if args.fail_on_goals and missed else 0
    if args.json:
        print_json(res.to_json())
        return code
    from tabulate import tabulate

    c = res.config
    print(f"{res.log} ({res.format}, {res.mode}): {res.steps} steps, {res.predicted_steps} predicted")
    print(f"config: {c['model']}, {counted(c['n_gpus'], 'GPU')} ({c['gpu']}), "
          f"{c['prompts_per_step']} prompts x {c['n']}, max {c['max_prompt_len']}+{c['max_response_len']}, "
          f"{c['algorithm']}")
    for note in res.notes:
        print(f"note: {note}")
    from ..calibrate.gpuinfer import CONTRADICTED_NOTE

    beaten = [n for n in res.notes if PEAK_BEATEN in n]
    # gpuinfer's note (printed above) already says the steps beat --gpu's peak roofline and what
    # that does to the constants: the warning only where no such note was made, said once
    said = any(n.startswith(CONTRADICTED_NOTE) for n in res.notes)
    if args.gpu and beaten and not said:
        print(f"warning: --gpu {args.gpu}: this log's steps are faster than {args.gpu}'s peak roofline allows "
              f"({beaten[0].split(PEAK_BEATEN)[0].strip()}): it did not run on {args.gpu} as read, so the constant "
              "seconds below were driven to 0 and the accuracy is no test of the model; without --gpu the "
              "GPU is inferred from the steps")
    cal = res.calibration
    # a constant the fit drove to nothing (3.44e-29 s) reads as the 0 it is, as in `calibrate`
    print(f"calibrated on {cal['source']}: deviation from the shared priors " + ", ".join(
        f"{k}={v:.3g}" for k, v in res.calibration_deviation.items()) + "; constant seconds " + ", ".join(
        f"{k.removesuffix('_overhead_s')}={v if abs(v) >= 1e-9 else 0:.3g}" for k, v in cal["scalars"].items()
        if k.endswith("_overhead_s")))
    for lo in cal["left_out"]:
        print(f"left out of the calibration: step {lo['step']} ({lo['reason']}: {lo['detail']})")
    rows = [[k, _pct(a["accuracy"]), _pct(a["naive_accuracy"]), f"{a['mean_actual_s']:.1f}",
             f"{a['mean_predicted_s']:.1f}"] for k, a in res.accuracy.items()]
    print(tabulate(rows, headers=["stage", "accuracy", "naive", "mean actual s", "mean predicted s"]))
    ex = res.excluded_s
    print(f"step time excludes validation ({ex.get('testing', 0):.0f} s) and checkpoints "
          f"({ex.get('save_checkpoint', 0):.0f} s); step-time spread {100 * res.step_time_variation:.0f}%")
    d = res.drift
    if d["steps"]:
        print(f"calibrate early, predict late: {d['steps']} step(s) from step {d['first_step']} with mean response "
              f">= {d['factor']:g}x the window's ({d['window_mean_response']:.0f} tokens): " + ", ".join(
                  f"{k} {_pct(a['accuracy'])} (naive {_pct(a['naive_accuracy'])})" for k, a in d["accuracy"].items()))
    else:
        print(f"calibrate early, predict late: no step's mean response reaches {d['factor']:g}x the window's "
              f"({d['window_mean_response']:.0f} tokens)")
    below = res.below_naive
    if below:
        print("below the naive predictor (the calibration steps' mean does better): "
              + ", ".join(f"{k} ({below[k]['accuracy']:.2f}% vs {below[k]['naive_accuracy']:.2f}%)" for k in below))
    print("goals: " + ", ".join(_goal_text(k, ok, below) for k, ok in res.goals.items()))
    if code:
        print(f"exit 1 (--fail-on-goals): {', '.join(missed)} missed")
    return code


def _goal_text(goal: str, ok: bool, below: dict) -> str:
    """``step_accuracy_ge_95 met``, ``... NOT met``, or ``met, but below the naive predictor`` when
    the goal's stage (``step``, ``gen``, ... named before ``_accuracy``) is."""
    stage = goal.split("_accuracy")[0] if "_accuracy" in goal else None
    if not ok:
        return f"{goal} NOT met"
    return f"{goal} met" + (" but below the naive predictor" if stage in below else "")


def _calibrate(args) -> int:
    from ..calibrate.files import calibrate_from_log, calibrate_from_stage_times
    from ..errors import PolytraceError

    if not args.out:
        raise PolytraceError("calibrate: -o/--out CAL_JSON is required (the calibration file to write)")

    if args.stage_times is not None:
        if args.log is not None:
            raise PolytraceError("calibrate: give a LOG or --stage-times, not both")
        if args.config or args.stage:
            raise PolytraceError(f"calibrate: {'--config' if args.config else '--stage'} reads a LOG's companion files "
                                 "and timers; --stage-times has neither")
        missing = [f for f, v in (("--model", args.model), ("--gpu", args.gpu), ("--gpus", args.gpus)) if v is None]
        if missing:
            raise PolytraceError(f"calibrate --stage-times needs {', '.join(missing)} (the run the averages come from)")
        from .compose_cmds import stated_run

        profile, stated_kw = stated_run(args)
        run = run_values(args, STAGE_TIMES_RUN)
        framework, algorithm, use_ref = run.pop("framework"), run.pop("algorithm"), run.pop("use_ref")
        kw = dict(prompts=args.prompts, n=args.n, max_prompt_len=args.max_prompt_len,
                  max_response_len=args.max_response_len, rollout_tp=args.rollout_tp, **run, **stated_kw)
        kw.update(estimate_settings(args, kw))  # --set: checked against these flags
        from ..stepmodel.frameworks import apply_framework

        apply_framework(framework, "sync", kw, {})  # the averages are a colocated run's
        res = calibrate_from_stage_times(
            args.stage_times, args.out, model=args.model, gpu=args.gpu, gpus=args.gpus, profile=profile,
            algorithm=algorithm, use_ref=use_ref, **kw)
    else:
        if args.log is None:
            raise PolytraceError("calibrate: give a LOG, or --stage-times with --model, --gpu and --gpus")
        # a log states its layout, batch, offloads, framework and engine precision (verl's
        # actor_rollout_ref.rollout.quantization, or --set it): those flags are --stage-times' own
        # (--algo and --no-ref are not refused: they never were)
        given = (given_flags(args, LOG_REFUSED) + (["--lengths"] if args.lengths else [])
                 + (["--profile"] if args.profile else []))  # was ignored, unsaid
        if given:
            raise PolytraceError(f"calibrate: {given[0]} applies to --stage-times; a log states its own")
        res = calibrate_from_log(args.log, args.out, calibrate_steps=args.calibrate_steps,
                                 overrides=_overrides(args))
    if args.json:
        print_json(res.to_json())
        return 0
    src = res.source
    print(f"wrote {args.out}: {res.model_name} ({res.model_family}) on {res.gpu}, "
          f"{res.mode}, from {src['kind']}" + (f" {src['path']}" if src.get("path") else ""))
    for note in res.notes:
        print(f"note: {note}")
    for lo in res.left_out:
        print(f"left out of the calibration: step {lo['step']} ({lo['reason']}: {lo['detail']})")
    # a constant the fit drove to nothing (3e-72 s) reads as the 0 it is
    print("scalars: " + ", ".join(f"{k}={v if abs(v) >= 1e-9 else 0:.3g}" for k, v in res.scalars.items()))
    print("in-sample error: " + ", ".join(f"{k} {v:.1f}%" for k, v in res.fit_error_pct.items()))
    return 0
