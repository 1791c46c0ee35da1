"""Same-run accuracy on every corpus log (issue 36's goal: "Same-run: step >= 95% and at or above the
naive predictor on every corpus log").

``validate LOG`` calibrates on a log's first ten steps and predicts every step of the run; the naive
predictor repeats the window's mean step. The goal is held on all the corpus's logs
(``calibrate.folds.corpus_names``), each on the GPU its publisher states (``corpus_gpus.json``), as
``polytrace/calibrate/priors.py`` prices them. Logs that miss are listed in ``UNMET`` with their
figures and the reason; the test fails when a listed log reaches the goal (take it off the list) as
well as when an unlisted one falls below it, so the list cannot drift from the model.

Why the four that miss only the naive bar miss it (CPU, c97b80b priors; scripts in the report of the
samerun branch): not the split of constant and per-token cost. In every one the window leaves the
split unidentified, and the calibrated step responds to length about as the priors' own split
does (elasticity of the step to the mean response length over the predicted steps, calibrated /
zero-shot shape / measured: MATH 7B 0.09 / 0.10 / 0.04, GPG Megatron 0.41 / 0.42 / 0.28, 0.5B 1-GPU
0.08 / 0.07 / -0.03, 7B 16-GPU 0.04 / 0.06 / 0.28), and the zero-shot shape scaled to the window's
level scores the same (97.7, 97.2, 97.0, 92.6%). Nor a periodic step: validation and checkpoint
seconds come out of the step for the model and the naive predictor alike (``validate._step_time``),
and the steps beside them run no slower (actual over predicted 2 steps before to 5 after within 1% of
the run's). It is the level: each fits its window to 0.4% (in-sample bias -0.4% to +0.2%) and the
rest of the run is 2.3-7.5% slower at its lengths than the window was; at its best level the model
equals or beats the constant at its own (98.5 / 98.5, 98.3 / 97.9, 97.4 / 97.5, 96.3 / 96.3). The
naive mean keeps the warm-up steps the model leaves out, which happen to sit nearer that later level.
No estimator from the window can see a slowdown that starts after it; blending toward the window's
mean would not either, and would undo a flat window's per-token cost (the AMD GRPO fix).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from polytrace.calibrate.corpus import load_corpus_gpus
from polytrace.calibrate.folds import corpus_names
from polytrace.calibrate.validate import Overrides, validate

GOAL = 95.0
# log -> why. Figures: CPU estimates at c97b80b (the priors refit with the agent loop's tool cut),
# step accuracy (naive beside).
UNMET = {
    "ladder/math__Qwen2.5-32B-bsz64_8-prompt1024-resp512-score0.6985.log":
        "93.5% (naive 90.4%): generation follows the mean response length (over its 40 steps 42.0 s + 0.141 s "
        "per token of the mean, r^2 0.84; 375 tokens in the window, 314 after) though every step reaches the "
        "512 cap; the priors put 75% of this run's generation in per-iteration host work (eager vLLM, LoRA's "
        "Triton launches on 64 layers), which the cap fixes, so the calibrated generation stays at 91-95 s "
        "against 65-105 s measured; the window's modelled time varies 0.3% and cannot split it",
    "ladder/math__Qwen2.5-7B-bsz64_8-prompt1024-resp512-score0.6513.log":
        "97.6%, below the naive 98.1%: the steps after the window 2.3% slower at their lengths; at its best "
        "level 98.5%, the constant's 98.5%",
    "more/verl_opd-retool_qwen2.5-3b_teacher32b_4gpu.output.log":
        "88.5% (naive 41.8%): a multi-turn agent loop with tool calls",
    # (its twin on Qwen3-4B meets the goal since the agent loop decodes what the tool cut leaves,
    # c97b80b: 71.5% -> 97.3%)
    "more/verl_qwen2-7b_gpg_megatron_8gpu.log":
        "97.2%, below the naive 97.5%: the update 4% over its price from step 53, 7-9% from step 81; at its best level "
        "98.3%, the constant's 97.9%",
    "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log":
        "94.5% (naive 85.9%): generation slows over steps 53-137 with flat lengths (test_validate.UNMET)",
    "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log":
        "96.6%, below the naive 97.1%: generation 19-20 s over steps 255-359 against 16.8 s at the same "
        "lengths; at its best level 97.4%, the constant's 97.5%",
    "verl_qwen2.5-7b_ppo_16gpu_resumed.log":
        "92.6% (naive 93.5%): its first checkpoint, step 110, ends the window and changes the regime (CPU "
        "memory 61.9 -> 74.6 GB, the steps after it 8-9% slower at flat lengths); the naive mean keeps the "
        "warm-up step 101 the model leaves out (without it 92.2%)",
}


# validate prices each corpus log exactly as the corpus read does (its stated GPU, window 10): in
# the corpus's xdist group, each is priced once a session (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("each_log_priced_once")


@functools.cache
def _same_run(folder: str) -> dict[str, tuple[float, float]]:
    root, gpus = Path(folder), load_corpus_gpus()
    out = {}
    for name in corpus_names(root):
        gpu = gpus.get(Path(name).name, {}).get("gpu")
        step = validate(str(root / name), overrides=Overrides(gpu=gpu) if gpu else None).accuracy["step"]
        out[name] = (step["accuracy"], step["naive_accuracy"])
    return out


def _meets(acc: float, naive: float) -> bool:
    return acc >= GOAL and acc >= naive


def test_unmet_lists_exactly_the_corpus_logs_below_the_goal(validation_logs):
    scores = _same_run(str(validation_logs))
    assert set(UNMET) <= set(scores), sorted(set(UNMET) - set(scores))
    missing = {n: s for n, s in scores.items() if not _meets(*s)}
    assert set(missing) == set(UNMET), {
        "below the goal, not listed": {n: missing[n] for n in set(missing) - set(UNMET)},
        "listed, goal now met": {n: scores[n] for n in set(UNMET) - set(missing)}}


def test_unmet_figures_are_todays(validation_logs):
    """Each listed log's stated accuracy is what the model gives today (to 0.3 points), so the list's
    figures cannot go stale."""
    scores = _same_run(str(validation_logs))
    for name, why in UNMET.items():
        stated = float(re.match(r"(-?[0-9.]+)%", why).group(1))
        assert scores[name][0] == pytest.approx(stated, abs=0.3), (name, scores[name], why)
