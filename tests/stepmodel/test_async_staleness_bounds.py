"""Fully-async's staleness bound and partial rollout, by hand (``stepmodel/streaming.py``).

verl's rollouter carries at most ``staleness x B`` samples across a weight sync, so at least
``(1 - staleness) x B`` of a version's samples are generated inside its window: the window lasts
until the ``ceil((1 - staleness) G)``-th of the batch's G groups is done (``version_floor_s``). The
trainer's last update cannot end before it, and the rollout is busy until it. With partial rollout
the sequences a sync interrupts come back as prompt + response so far on an emptied prefix cache
(verl resets vLLM's prefix cache at every pause): a re-prefill of that whole prefix, paid only for
what is still in flight at the sync.

The golden file (tests/test_golden.py) listed every fully-async entry as INTENDED when this file was
written (that list is empty since), so these cases were built by hand, not read from it: they fail
on an off-by-one in the quantile, a floor scaled by 0.98, a re-prefill of the prompts only, or a
resume charged when nothing was in flight, each named, where the golden file only says a number moved.
"""

from __future__ import annotations

import numpy as np
import pytest

from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.stepmodel.streaming import (
    StreamRollout,
    VersionPolicy,
    stream_rollout,
    trainer_pipeline,
    version_floor_s,
)

READY = np.array([7.0, 1.0, 10.0, 4.0, 2.0, 9.0, 3.0, 8.0, 6.0, 5.0])  # ten groups done at 1..10 s, shuffled


@pytest.mark.parametrize("staleness, floor", [
    (0.0, 10.0),  # no sample may span a sync: the whole batch, its last group included
    (0.05, 10.0),  # ceil(9.5) = 10
    (0.1, 9.0),  # verl's default: ceil(9) = 9, the 9th group
    (0.25, 8.0),  # ceil(7.5) = 8
    (0.3, 7.0),
    (0.95, 1.0),  # ceil(0.5) = 1: the first group
    (1.0, 0.0),  # every sample may span a sync (one-step-off): no floor
    (2.0, 0.0),
])
def test_the_window_floor_is_the_ceil_quantile_group(staleness, floor):
    assert version_floor_s(READY, staleness) == floor


def test_the_window_floor_of_no_groups_is_zero():
    assert version_floor_s([], 0.1) == 0.0


def _stream(floor_s=0.0, resume_s=0.0, drain_s=0.0):
    return StreamRollout(batch_s=1.0, drain_s=drain_s, drain_lost_s=0.0, concurrency=8, engines=1, in_flight=8,
                         resume_s=resume_s, floor_s=floor_s)


def test_the_trainer_ends_no_earlier_than_the_window_floor_and_the_rollout_is_busy_until_it():
    # 100 samples at 100 a second arrive within ~1 s and train in 0.5 s: without the floor a version
    # ends at ~1.4 s; the bound's window (the 0.9-quantile group done at 5 s) holds it to 5 s exactly
    policy = VersionPolicy(chunks=1, staleness=0.1, partial=True)
    pipe = trainer_pipeline(100, 0.5, 0.25, policy, rate=100.0, stream=_stream(floor_s=5.0))
    assert pipe.train_end_s == pytest.approx(5.0, rel=1e-12)
    assert pipe.step_s == pytest.approx(5.25, rel=1e-12)  # the floor plus the sync
    assert pipe.rollout_busy_s == pytest.approx(5.0, rel=1e-12)  # decoding the window's long samples
    free = trainer_pipeline(100, 0.5, 0.25, policy, rate=100.0, stream=_stream(floor_s=0.0))
    assert free.train_end_s < 1.5  # the floor, not the arrivals, set the 5 s above


def test_a_resume_is_paid_for_what_a_sync_interrupts_and_not_once_the_rollout_drained():
    policy = VersionPolicy(chunks=1, staleness=0.1, partial=True)
    # a quick trainer (1 ms) syncs while the rollout still admits (bound reached at ~1.1 s, sync at
    # ~1.0 s): a full engine's in-flight set is interrupted, its whole re-prefill paid next version
    busy = trainer_pipeline(100, 0.001, 0.0, policy, rate=100.0, stream=_stream(resume_s=0.2, drain_s=1.0))
    assert busy.resume_s == pytest.approx(0.2, rel=1e-12)
    # a slow trainer (10 s) syncs long after the bound stopped admissions and the 1 s drain ran the
    # in-flight set down: nothing left to interrupt, no re-prefill
    idle = trainer_pipeline(100, 10.0, 0.0, policy, rate=100.0, stream=_stream(resume_s=0.2, drain_s=1.0))
    assert idle.resume_s == 0.0
    # the 90 samples past the 10 carried in arrive in 0.9 s, then 10 s of training, no resume before
    assert idle.step_s == pytest.approx(10.9, rel=1e-12)


def test_the_re_prefill_grows_with_the_response_generated_before_the_sync():
    """The interrupted sequences re-prefill prompt + response so far: at the same 64-token prompts,
    responses 8x longer put ~8x more tokens in flight behind each prompt, so the resume costs
    several times more; a resume priced on the prompts alone would not move."""
    model, gpu = get_model("qwen2.5-0.5b"), get_gpu("h100-sxm")
    from polytrace.stepmodel.rollout import ONE_GPU_ENGINE

    prompts = np.full(64, 64)
    short = stream_rollout(model, gpu, prompts, np.full(64, 256), n_gpus=1, engine=ONE_GPU_ENGINE, in_flight_cap=64)
    long = stream_rollout(model, gpu, prompts, np.full(64, 2048), n_gpus=1, engine=ONE_GPU_ENGINE, in_flight_cap=64)
    assert short.in_flight == long.in_flight == 64
    assert long.resume_s > 3.0 * short.resume_s > 0.0


def test_a_calibrations_price_scales_every_duration_of_the_stream():
    s = StreamRollout(batch_s=1.0, drain_s=2.0, drain_lost_s=0.5, concurrency=8, engines=2, in_flight=16,
                      resume_s=0.25, floor_s=3.0).scaled(1.5)
    assert (s.batch_s, s.drain_s, s.drain_lost_s, s.resume_s, s.floor_s) == (1.5, 3.0, 0.75, 0.375, 4.5)
    assert (s.concurrency, s.engines, s.in_flight) == (8, 2, 16)  # counts, not durations


EXAMPLE = ("dapo-math-32b", "qwen2.5-7b")


def test_a_partial_rollouts_generation_pays_its_re_prefill_where_no_floor_binds():
    """At staleness 1 (no window floor) a version's generation is the full engines' pace plus the
    re-prefill of what the last sync interrupted, both as reported in the mode's detail."""
    from polytrace.stepmodel.efficiency import PRIORS
    from polytrace.stepmodel.modes import mode_estimate

    res = mode_estimate(*EXAMPLE, "h100", 16, mode="fully-async", rollout_gpus=8, staleness=1.0, calibration=PRIORS)
    mode = res.summary["mode"]
    assert mode["partial_rollout"]
    for row, detail in zip(res.rows, mode["details"]):
        assert detail["stream"]["floor_s"] == 0.0 and detail["resume_paid_s"] > 0.0
        assert row["stages_s"]["gen"] == pytest.approx(detail["stream"]["batch_s"] + detail["resume_paid_s"], rel=1e-12)


def test_a_separated_mode_on_mi300x_takes_the_published_device_figures(monkeypatch):
    """The colocated estimate's device priors (stepmodel/devices.py) hold in one-step-off too: the
    trainer's passes, mostly GEMMs, slow by between 1 + 0.5 x (1/0.636 - 1) = 1.29 (GEMMs half the
    pass) and 1/0.636 = 1.57 (all of it); generation by at most the HBM figure's 1/0.870 = 1.15."""
    from polytrace.stepmodel import devices
    from polytrace.stepmodel.efficiency import PRIORS
    from polytrace.stepmodel.modes import mode_estimate

    def stages():
        res = mode_estimate(*EXAMPLE, "mi300x", 16, mode="one-step-off", rollout_gpus=8, calibration=PRIORS)
        return res.rows[0]["stages_s"]

    published = stages()
    monkeypatch.setattr(devices, "PUBLISHED", {k: v for k, v in devices.PUBLISHED.items() if k != "mi300x"})
    nvidia = stages()
    gemm, hbm = (668.4 / 1307.4) / (794.5 / 989.0), (4090.0 / 5300.0) / (2970.0 / 3350.0)
    for stage in ("old_log_prob", "update_actor"):
        ratio = published[stage] / nvidia[stage]
        assert 1.0 + 0.5 * (1.0 / gemm - 1.0) < ratio <= 1.0 / gemm + 1e-12, (stage, ratio)
    assert 1.0 < published["gen"] / nvidia["gen"] <= 1.0 / hbm + 1e-12
