"""``polytrace estimate``, ``polytrace impact`` and ``polytrace validate``: RL step estimates, what a
change in kernel timings does to them, and their check on real logs."""

from __future__ import annotations

import sys

from ._args import any_int as _int
from ._args import finite_float as _float
from ._args import positive_int as _pos_int
from ._args import step_count as _step_count
from ._io import print_json


def register(sub) -> None:
    p = sub.add_parser("estimate", help="per-stage time of RL training steps (estimated, no GPU needed)",
                       description="Estimate rollout, log-prob, reference, critic and update time per RL "
                       "step for a workload profile, a model and a cluster. Every stage is a sum of kernel "
                       "families (gemm, attention, decode, prefill, logprob, packing, optimizer, comm, host), "
                       "each priced from measured kernel timings on that GPU (results/<gpu>/, or --results) "
                       "where present, else at the roofline at assumed efficiencies.")
    p.add_argument("--model", required=True, help="model preset (e.g. qwen2.5-7b) or a HF config.json")
    p.add_argument("--gpu", required=True, help="GPU preset (e.g. h100, a100-80g, h200)")
    p.add_argument("--gpus", required=True, type=_pos_int, help="GPU count")
    p.add_argument("--profile", default="dapo-math-32b", help="workload profile (default dapo-math-32b)")
    p.add_argument("--steps", type=_step_count, default=1, help="sampled steps to estimate (default 1)")
    p.add_argument("--seed", type=_int, default=0)
    p.add_argument("--rollout-tp", type=_pos_int, default=None, help="rollout tensor parallelism (default: fit)")
    p.add_argument("--strategy", choices=("fsdp", "megatron"), default="fsdp")
    p.add_argument("--train-tp", type=_pos_int, default=1, help="Megatron tensor parallelism")
    p.add_argument("--train-pp", type=_pos_int, default=1, help="Megatron pipeline parallelism")
    p.add_argument("--algo", choices=("grpo", "ppo"), default="grpo", help="ppo adds a critic")
    p.add_argument("--no-ref", action="store_true", help="no reference model")
    p.add_argument("--prompts", type=_pos_int, default=None, help="prompts per step (default: profile)")
    p.add_argument("--micro-batch-tokens", type=_pos_int, default=None,
                   help="token budget per micro-batch per GPU; at least the longest sequence (default: 16384, "
                   "or max prompt + max response rounded up to 1024 when longer)")
    p.add_argument("--max-prompt-len", type=_pos_int, default=None)
    p.add_argument("--max-response-len", type=_pos_int, default=None)
    p.add_argument("--mem-fraction", type=_float, default=0.5, help="GPU memory share of the inference engine")
    p.add_argument("--kernels", action="store_true",
                   help="print per stage the seconds of each kernel family, its share of the step and where it "
                   "came from (result file and provider, or roofline), and the Amdahl table")
    p.add_argument("--results", action="append", metavar="PATH", default=None,
                   help="price measured families from these result files or folders, all of the --gpu "
                   "(repeatable; default: results/<gpu>/, each benchmark's latest run)")
    p.add_argument("--provider", action="append", metavar="FAMILY=NAME", default=None,
                   help="what-if: price a measured family (gemm, attention, decode, logprob, packing) with "
                   "another provider's timings, e.g. --provider logprob=torch-eager (repeatable)")
    p.add_argument("--speedup", action="append", metavar="FAMILY=X", default=None,
                   help="what-if: make a kernel family X times faster (X > 0; 0.5 = twice as slow), "
                   "e.g. --speedup logprob=1.5 (repeatable)")
    p.add_argument("--amdahl", type=_float, default=2.0, metavar="X",
                   help="the speedup of each family in the Amdahl table of --kernels (default 2)")
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
    i.add_argument("--steps", type=_step_count, default=8, help="sampled steps to price (default 8)")
    i.add_argument("--seed", type=_int, default=0, help="sampling seed of the steps (default 0)")
    out = i.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument("--markdown", action="store_true", help="print Markdown for a pull-request comment")
    i.set_defaults(func=_impact)

    v = sub.add_parser("validate", help="check step estimates against a real verl log",
                       description="Calibrate a handful of scalars on the first K steps of a verl log "
                       "(console or wandb CSV) and predict every later step from its logged length "
                       "statistics; report accuracy per stage and for the step, next to the naive "
                       "predictor (the calibration steps' mean).")
    v.add_argument("log", help="verl console log or wandb CSV export")
    v.add_argument("--calibrate-steps", type=_pos_int, default=10, help="calibration steps (default 10)")
    v.add_argument("--calibrate-on", default=None, help="calibrate on all steps of another log of the same hardware")
    v.add_argument("--model", default=None, help="model, when the log does not name it")
    v.add_argument("--gpu", default=None, help="GPU preset (logs do not state it; default a100-80g)")
    v.add_argument("--gpus", type=_pos_int, default=None, help="GPU count, when the log does not state it")
    v.add_argument("--prompts", type=_pos_int, default=None, help="prompts per step, when not stated")
    v.add_argument("--n", type=_pos_int, default=None, help="responses per prompt, when not stated")
    v.add_argument("--max-prompt-len", type=_pos_int, default=None)
    v.add_argument("--max-response-len", type=_pos_int, default=None)
    v.add_argument("--rollout-tp", type=_pos_int, default=None)
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=_validate)


def _estimate(args) -> int:
    from ..compose import estimate
    from ..compose.pricing import parse_assignments

    res = estimate(args.profile, args.model, args.gpu, args.gpus, steps=range(args.steps), seed=args.seed,
                   rollout_tp=args.rollout_tp, strategy=args.strategy, train_tp=args.train_tp,
                   train_pp=args.train_pp, algorithm=args.algo, use_ref=not args.no_ref, prompts=args.prompts,
                   micro_batch_tokens=args.micro_batch_tokens or "auto", max_prompt_len=args.max_prompt_len,
                   max_response_len=args.max_response_len, mem_fraction=args.mem_fraction,
                   results=args.results, providers=parse_assignments(args.provider, "--provider"),
                   speedups=parse_assignments(args.speedup, "--speedup"),
                   amdahl=args.amdahl if args.kernels else None)
    for w in res["warnings"]:  # on stderr, so --json output stays one JSON document
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        print_json(res)
        return 0
    from tabulate import tabulate

    from ..compose.breakdown import amdahl_lines, kernel_table, source_lines, what_if_lines

    c = res["config"]
    print(f"{res['profile']} | {c['model']} | {c['n_gpus']} x {c['gpu']} | rollout TP {c['rollout_tp']} | "
          f"{c['strategy']} | {c['algorithm']} | {c['prompts_per_step']} prompts x {c['n']} | "
          f"micro-batch {c['micro_batch_tokens']} tokens")
    print(f"source: {res['source']}")
    for line in format_memory(res["memory"]):
        print(line)
    stages = [s for s in res["summary"]["mean_stages_s"] if any(r["stages_s"][s] > 0 for r in res["rows"])]
    table = [[r["step"], *(f"{r['stages_s'][s]:.1f}" for s in stages), f"{r['step_s']:.1f}",
              f"{r['tokens_per_s_per_gpu']:.0f}", f"{100 * r['idle']['rollout_tail_share']:.1f}%",
              f"{100 * r['idle']['rank_imbalance_share']:.1f}%"] for r in res["rows"]]
    print(tabulate(table, headers=["step", *(f"{s} s" for s in stages), "step s", "tok/s/GPU",
                                   "idle: tail", "idle: ranks"]))
    for line in what_if_lines(res["summary"]):
        print(line)
    if args.kernels:
        summary = res["summary"]
        print(f"\nkernel families (estimated, mean over {summary['steps']} sampled steps):")
        print(kernel_table(summary))
        print("\nwhere each family's time comes from:")
        for line in source_lines(summary):
            print(f"  {line}")
        print(f"\nAmdahl: the step with one kernel family {args.amdahl:g}x faster (share = the most it can save):")
        print(amdahl_lines(summary))
    return 0


def _impact(args) -> int:
    from ..compose.impact import format_impact, impact

    res = impact(args.baseline, args.candidate, profile=args.profile, model=args.model, gpu=args.gpu,
                 gpus=args.gpus, steps=range(args.steps), seed=args.seed)
    if args.json:
        print_json(res)
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


def _validate(args) -> int:
    from ..validate import Overrides, validate

    ov = Overrides(model=args.model, gpu=args.gpu, gpus=args.gpus, prompts=args.prompts, n=args.n,
                   max_prompt_len=args.max_prompt_len, max_response_len=args.max_response_len,
                   rollout_tp=args.rollout_tp)
    res = validate(args.log, calibrate_steps=args.calibrate_steps, calibrate_on=args.calibrate_on, overrides=ov)
    if args.json:
        print_json(res)
        return 0
    from tabulate import tabulate

    c = res["config"]
    print(f"{res['log']} ({res['format']}): {res['steps']} steps, {res['predicted_steps']} predicted")
    print(f"config: {c['model']}, {c['n_gpus']} GPUs ({c['gpu']}), {c['prompts_per_step']} prompts x {c['n']}, "
          f"max {c['max_prompt_len']}+{c['max_response_len']}, {c['algorithm']}")
    for note in res["notes"]:
        print(f"note: {note}")
    print(f"calibrated on {res['calibration']['source']}: " + ", ".join(
        f"{k}={v:.3g}" for k, v in res["calibration"]["scalars"].items()))
    rows = [[k, f"{a['accuracy']:.1f}%", f"{a['naive_accuracy']:.1f}%", f"{a['mean_actual_s']:.1f}",
             f"{a['mean_predicted_s']:.1f}"] for k, a in res["accuracy"].items()]
    print(tabulate(rows, headers=["stage", "accuracy", "naive", "mean actual s", "mean predicted s"]))
    ex = res["excluded_s"]
    print(f"step time excludes validation ({ex.get('testing', 0):.0f} s) and checkpoints "
          f"({ex.get('save_checkpoint', 0):.0f} s); step-time spread {100 * res['step_time_variation']:.0f}%")
    print("goals: " + ", ".join(f"{k} {'met' if ok else 'NOT met'}" for k, ok in res["goals"].items()))
    return 0
