"""Same-run accuracy on every corpus log (issue 36's goal: "Same-run: step >= 95% and at or above the
naive predictor on every corpus log").

``validate LOG`` calibrates on a log's first ten steps and predicts every step of the run; the naive
predictor repeats the window's mean step. The goal is held on all the corpus's logs
(``calibrate.folds.corpus_names``), each on the GPU its publisher states (``corpus_gpus.json``), as
``polytrace/calibrate/priors.py`` prices them. Logs that miss are listed in ``UNMET`` with their
figures and the reason; the test fails when a listed log reaches the goal (take it off the list) as
well as when an unlisted one falls below it, so the list cannot drift from the model.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from _prepared import patch_prepare

from polytrace.calibrate.folds import corpus_names
from polytrace.calibrate.priors import load_corpus_gpus
from polytrace.calibrate.validate import Overrides, validate

GOAL = 95.0
# log -> why. Figures: CPU estimates at c97b80b (the priors refit with the agent loop's tool cut),
# step accuracy (naive beside).
UNMET = {
    "ladder/math__Qwen2.5-32B-bsz64_8-prompt1024-resp512-score0.6985.log": "93.5% (naive 90.4%)",
    "ladder/math__Qwen2.5-7B-bsz64_8-prompt1024-resp512-score0.6513.log": "97.6%, below the naive 98.1%",
    "more/verl_opd-retool_qwen2.5-3b_teacher32b_4gpu.output.log":
        "88.5% (naive 41.8%): a multi-turn agent loop with tool calls",
    # (its twin on Qwen3-4B meets the goal since the agent loop decodes what the tool cut leaves,
    # c97b80b: 71.5% -> 97.3%)
    "more/verl_qwen2-7b_gpg_megatron_8gpu.log": "97.2%, below the naive 97.5%",
    "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log":
        "94.5% (naive 85.9%): generation slows over steps 53-137 with flat lengths (test_validate.UNMET)",
    "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log": "96.6%, below the naive 97.1%",
    "verl_qwen2.5-7b_ppo_16gpu_resumed.log": "92.6% (naive 93.5%)",
}


@pytest.fixture(scope="module", autouse=True)
def _each_log_priced_once():
    """``validate`` prices each corpus log exactly as the corpus read does (its stated GPU, window
    10): through the memo of tests/_prepared.py, in the corpus's xdist group (tests/conftest.py),
    each is priced once a session. Nothing here patches the model."""
    with pytest.MonkeyPatch.context() as mp:
        patch_prepare(mp)
        yield


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
