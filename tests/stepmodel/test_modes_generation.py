"""Separated modes generate at the calibration's price, and fewer rollout GPUs never generate the
same work faster (``stepmodel/modes.py``).

The fully-async stream was scaled by the rollout's GEMM slowdown alone, so its host work (the
priors' per-iteration and per-sequence kinds, several times their base price) stayed at the
roofline: the README's 16-GPU example generated on 6 rollout GPUs in 7.1 s against the colocated
run's 34.8 s on all 16. The README's example is used throughout (Qwen2.5-7B, DAPO-math lengths,
16 H100s), at the shared priors as ``estimate`` prices it."""

from __future__ import annotations

import functools

import pytest

from polytrace.stepmodel.efficiency import PRIORS
from polytrace.stepmodel.modes import mode_estimate

EXAMPLE = ("dapo-math-32b", "qwen2.5-7b", "h100", 16)


@functools.cache
def _gen(mode: str, rollout_gpus: int, priced: bool) -> float:
    res = mode_estimate(*EXAMPLE, mode=mode, rollout_gpus=rollout_gpus, calibration=PRIORS if priced else None)
    return res.summary["mean_stages_s"]["gen"]


@pytest.mark.parametrize("rollout_gpus", [4, 8])
def test_the_stream_is_priced_as_the_batch_on_the_same_gpus(rollout_gpus):
    """The same rollout GPUs and batch: the stream's generation takes the calibration by the same
    factor as one-step-off's whole-batch generation (every rollout family at its own slowdown)."""
    stream = _gen("fully-async", rollout_gpus, True) / _gen("fully-async", rollout_gpus, False)
    batch = _gen("one-step-off", rollout_gpus, True) / _gen("one-step-off", rollout_gpus, False)
    assert stream == pytest.approx(batch, rel=1e-9)
    # not the rollout's GEMM slowdown alone (0.95 in the priors refit at ef0b374, 0.75 before), which the
    # stream took before: the host kinds' price lifts the batch's ratio above 1 (1.27 on 4 GPUs, 1.13 on 8)
    assert batch > 1.0


@pytest.mark.parametrize("mode", ["one-step-off", "fully-async"])
def test_fewer_rollout_gpus_never_generate_faster(mode):
    gens = [_gen(mode, n, True) for n in (4, 8, 12)]
    assert gens[0] >= gens[1] >= gens[2] > 0, gens


@pytest.mark.xfail(strict=True, reason=(
    "the README's example under the 22-log priors refit at ef0b374: fully-async generates a batch on 6 rollout GPUs "
    "in 7.9 s (7.6 s before the refit, 7.1 s before the stream took the host kinds' price), the colocated run on "
    "all 16 in 33.7 s (30.7 s before the refit): the stream "
    "(staleness 0.1, partial rollout) is priced at its steady rate with the long tail carried into later steps "
    "(a whole batch on the same 6 GPUs: 33 s at the roofline, 31 s of it the tail), so the 16 colocated GPUs "
    "waiting on the tail lose to 6 streaming ones; whether a 0.1 staleness bound lets the tail hide that much is "
    "not checked against a published run here (fully-async 3.36x sync in this example, 4.08x before the refit)"))
def test_the_readme_example_generates_no_faster_on_6_gpus_than_on_16():
    sync = mode_estimate(*EXAMPLE, mode="sync", calibration=PRIORS).summary["mean_stages_s"]["gen"]
    assert _gen("fully-async", 6, True) >= sync
