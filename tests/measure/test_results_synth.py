"""The synthetic result builder (``tests/_results_synth.py``) writes what the suites write, so the
results, gate and plot tests exercise the real schema."""

from __future__ import annotations

import numpy as np
from _results_synth import PROVIDERS, SHAPES, make_result, write

from polytrace.measure.results import load_result


def test_builder_round_trips_through_the_reader(tmp_path):
    r = load_result(write(tmp_path / "a.json", make_result()))
    assert len(r.benchmarks) == len(SHAPES) * len(PROVIDERS)
    b = r.by_id()["logprob/token_logprobs/triton/fwd/tokens=4096,vocab=32000"]
    assert b.rounds.size == 30 and b.provider_kind == "ours" and b.weight == 0.40
    assert abs(np.median(b.rounds) / 2.0e-3 - 1) < 0.02
    assert r.gpu_slug == "h200" and r.suite == "logprob" and r.date == "2026-11-02"


def test_planted_slowdown_is_in_the_rounds(tmp_path):
    base = load_result(write(tmp_path / "a.json", make_result(seed=1)))
    cand = load_result(write(tmp_path / "b.json", make_result(seed=2, slowdown={SHAPES[4][0]: 1.10})))
    i = f"logprob/token_logprobs/triton/fwd/{SHAPES[4][0]}"
    ratio = np.median(cand.by_id()[i].rounds) / np.median(base.by_id()[i].rounds)
    assert 1.05 < ratio < 1.15
