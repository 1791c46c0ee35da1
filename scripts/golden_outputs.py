"""Write (or check) ``tests/golden/step_model.json``: what the step model answers today, kept so a
refactor can prove it changed no number it did not mean to change.

The file holds ``estimate --json`` for the configurations in ``ESTIMATES`` (models, GPUs, counts,
profiles, modes, strategies, precisions, ``--set`` settings, a calibration file) and ``validate
--json`` plus ``validate --zero-shot --json`` on the nine shared verl logs (``LOGS``), each run
in-process through ``polytrace.cli.main`` exactly as a user types it. ``tests/test_golden.py``
recomputes them and requires every number and string identical (floats to rel 1e-12), except the
entries its commented intended-changes list names.

    .venv/bin/python scripts/golden_outputs.py [--shared ../shared] [-o tests/golden/step_model.json]

About 60 CPU-seconds (18 log runs of ~2.5 s, 37 estimates of ~0.3 s).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "step_model.json"

# The nine verl logs the priors were fitted on (../shared/validation-logs), named so a new log in
# that folder does not change the file.
LOGS = (
    "verl_gemma-2-2b_ppo_2gpu_p1024_r512.log", "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log",
    "verl_qwen2-7b_ppo_8gpu_b1024x5.log", "verl_qwen2-7b_ppo_8gpu_b512x1.log",
    "verl_qwen2.5-0.5b_grpo_8gpu_n2_dynbsz.log", "verl_qwen2.5-0.5b_ppo_1gpu_p1024_r512.log",
    "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log", "verl_qwen2.5-0.5b_ppo_8gpu_b2048.log",
    "verl_qwen2.5-7b_ppo_16gpu_resumed.log",
)
# The log a calibration file is written from (``{cal}`` in ESTIMATES).
CAL_LOG = "verl_qwen2-7b_ppo_8gpu_b1024x5.log"

Q7 = "--model qwen2.5-7b --gpu h100"
# name -> estimate's arguments (``{cal}``: the calibration file of CAL_LOG)
ESTIMATES = {
    "q7_h100_8": f"{Q7} --gpus 8",
    "q7_h100_8_steps": f"{Q7} --gpus 8 --steps 0-3 --seed 3",
    "q7_h100_8_roofline": f"{Q7} --gpus 8 --roofline",
    "q7_h100_8_kernels": f"{Q7} --gpus 8 --kernels --amdahl 3",
    "q7_h100_8_speedup": f"{Q7} --gpus 8 --speedup logprob=1.5 --speedup gemm=0.5",
    "q7_h100_8_lora": f"{Q7} --gpus 8 --lora-rank 32",
    "q7_h100_8_offload": f"{Q7} --gpus 8 --param-offload --optimizer-offload",
    "q7_h100_8_shape": f"{Q7} --gpus 8 --prompts 64 --n 16 --ppo-mini-batch 16 --max-response-len 4096",
    "q7_h100_8_tokens": f"{Q7} --gpus 8 --micro-batch-tokens 24576 --mem-fraction 0.7 --rollout-tp 2",
    "q7_h100_8_responses": f"{Q7} --gpus 8 --n 8 --responses-per-step 512 --train-batch 128",
    "q7_h100_8_fp8": f"{Q7} --gpus 8 --rollout-precision fp8 --train-precision fp8",
    "q7_h100_8_no_recompute": f"{Q7} --gpus 8 --set actor_rollout_ref.model.enable_gradient_checkpointing=false",
    "q7_h100_8_eager": f"{Q7} --gpus 8 --set actor_rollout_ref.rollout.enforce_eager=true",
    "q7_h100_8_padded": f"{Q7} --gpus 8 --set actor_rollout_ref.model.use_remove_padding=false",
    "q7_h100_8_static_mb": f"{Q7} --gpus 8 --set actor_rollout_ref.actor.use_dynamic_bsz=false "
                           "--set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "q7_h100_8_nemo": f"{Q7} --gpus 8 --framework nemo-rl",
    "q7_h100_16_one_step_off": f"{Q7} --gpus 16 --mode one-step-off --rollout-gpus 8 --train-gpus 8",
    "q7_h100_16_one_step_off_recompute": f"{Q7} --gpus 16 --mode one-step-off --rollout-gpus 8 --train-gpus 8 "
                                         "--set actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "q7_h100_16_one_step_off_eager": f"{Q7} --gpus 16 --mode one-step-off --rollout-gpus 8 --train-gpus 8 "
                                     "--set actor_rollout_ref.rollout.enforce_eager=true",
    "q7_h100_16_fully_async": f"{Q7} --gpus 16 --mode fully-async",
    "q7_h100_16_fully_async_knobs": f"{Q7} --gpus 16 --mode fully-async --staleness 0.3 --updates-per-sync 2 "
                                    "--no-partial-rollout --in-flight-updates --pipelined-sync",
    "q7_h100_16_compare": f"{Q7} --gpus 16 --compare-modes",
    "q05_a100_1_ppo": "--model qwen2.5-0.5b --gpu a100-80g --gpus 1 --algo ppo",
    "gemma2b_a100_2_noref": "--model gemma-2-2b --gpu a100-80g --gpus 2 --algo ppo --no-ref --max-response-len 512",
    "q32_h200_16_megatron": "--model qwen2.5-32b --gpu h200 --gpus 16 --strategy megatron --train-tp 4 --train-pp 2",
    "q32_h200_16_megatron_cp_vpp": "--model qwen2.5-32b --gpu h200 --gpus 16 --strategy megatron --train-tp 2 "
                                   "--train-pp 2 --train-cp 2 --train-vpp 2",
    "moe_h200_16_megatron_ep": "--model qwen3-30b-a3b --gpu h200 --gpus 16 --strategy megatron --train-tp 2 "
                               "--train-ep 4 --rollout-tp 4 --rollout-ep 4",
    "q32_h100_16_cpu_optimizer": "--model qwen2.5-32b --gpu h100 --gpus 16 --strategy megatron --train-tp 4 "
                                 "--cpu-optimizer 0.5 --cpu-optimizer-overlap",
    "llama8b_h200_8_fp8_engine": "--model llama-3.1-8b --gpu h200 --gpus 8 --rollout-precision fp8",
    "q14_deepcoder_h100_16": "--model qwen2.5-14b --gpu h100 --gpus 16 --profile deepcoder-14b",
    "search_r1_multiturn": "--model qwen2.5-7b --gpu h100 --gpus 8 --profile search-r1-7b --generated-share 0.5",
    "stated_lengths": f"{Q7} --gpus 8 --lengths mean=700,max=2048,prompt=300",
    "a100_40g_small": "--model qwen2.5-1.5b --gpu a100-40g --gpus 4 --profile model-b-math",
    "cal_same_run": "--calibration {cal}",
    "cal_16_gpus": "--calibration {cal} --gpus 16",
    "cal_one_step_off": "--calibration {cal} --gpus 16 --mode one-step-off",
    "cal_compare": "--calibration {cal} --gpus 16 --compare-modes",
}


def _run(argv: list[str]) -> object:
    """``polytrace ARGV`` in-process: its stdout parsed as JSON; a non-zero exit is an error."""
    from polytrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if code:
        raise RuntimeError(f"polytrace {' '.join(argv)}: exit {code}: {err.getvalue().strip()[-400:]}")
    return json.loads(out.getvalue())


def _normalised(value, replace: dict[str, str]):
    """Paths of this machine (the shared folder, the temporary calibration file) as placeholders."""
    if isinstance(value, dict):
        return {k: _normalised(v, replace) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalised(v, replace) for v in value]
    if isinstance(value, str):
        for old, new in replace.items():
            value = value.replace(old, new)
    return value


def compute(shared: Path, only: set[str] | None = None) -> dict:
    """{entry name: JSON output} (``only``: those names)."""
    logs = shared / "validation-logs"
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        cal = str(Path(tmp) / "cal.json")
        replace = {cal: "<cal>", str(logs): "<logs>"}
        # results/ of the checkout may hold a GPU's timings: price at the roofline and priors alone
        with _env(POLYTRACE_RESULTS_DIR=tmp):
            if only is None or any("{cal}" in ESTIMATES.get(n, "") for n in only):
                _run(["calibrate", str(logs / CAL_LOG), "-o", cal, "--json"])
            for name, line in ESTIMATES.items():
                key = f"estimate/{name}"
                if only is None or key in only:
                    out[key] = _normalised(_run(["estimate", *line.format(cal=cal).split(), "--json"]), replace)
            for log in LOGS:
                for kind, extra in (("validate", []), ("zero_shot", ["--zero-shot"])):
                    key = f"{kind}/{log}"
                    if only is None or key in only:
                        out[key] = _normalised(_run(["validate", str(logs / log), *extra, "--json"]), replace)
    return out


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=Path(os.environ.get("POLYTRACE_SHARED", REPO.parent / "shared")))
    ap.add_argument("-o", "--out", type=Path, default=GOLDEN)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    doc = {"about": "polytrace's estimate / validate / validate --zero-shot JSON, written by "
                    "scripts/golden_outputs.py; tests/test_golden.py recomputes it",
           "entries": compute(args.shared)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}: {len(doc['entries'])} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
