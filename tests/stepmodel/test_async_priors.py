"""The separated modes apply the shared priors under the run's own recompute and engine settings
(issue 35: ``stepmodel/modes.py`` priced the one-step-off and fully-async update with the priors of
recompute off and CUDA graphs on whatever the run said: Qwen2.5-7B on 8 trainer H100s with
recompute on, update 6.61 s one-step-off against 10.45 s in sync)."""

from __future__ import annotations

import pytest

from polytrace.stepmodel import estimate
from polytrace.stepmodel.efficiency import PRIORS, prior_scalars
from polytrace.stepmodel.modes import mode_estimate
from polytrace.stepmodel.scalars import Scalars

# 32 prompts x 8 of search-r1's lengths on 7B: each estimate about a second
SMALL = dict(prompts=32, steps=[0])
ARGS = ("search-r1-7b", "qwen2.5-7b", "h100")
SPLIT = dict(rollout_gpus=8, train_gpus=8)


@pytest.mark.parametrize("recompute", [True, False])
def test_one_step_off_update_is_the_sync_update_on_its_trainer_gpus(recompute):
    # the trainer side of an 8:8 split is an 8-GPU trainer: its update is sync's on 8 GPUs
    kw = dict(SMALL, calibration=PRIORS, gradient_checkpointing=recompute)
    sync = estimate(*ARGS, 8, **kw).summary["mean_stages_s"]["update_actor"]
    off = mode_estimate(*ARGS, 16, mode="one-step-off", **SPLIT, **kw).summary["mean_stages_s"]["update_actor"]
    assert off == pytest.approx(sync, rel=1e-12)


@pytest.mark.parametrize("mode", ["one-step-off", "fully-async"])
@pytest.mark.parametrize("eager,recompute", [(True, True), (False, True), (True, False)])
def test_separated_modes_apply_the_runs_priors(mode, eager, recompute):
    kw = dict(SMALL, **SPLIT, mode=mode, gradient_checkpointing=recompute, run_fields={"eager": eager})
    shared = mode_estimate(*ARGS, 16, calibration=PRIORS, **kw)
    resolved = prior_scalars(eager=eager, gradient_checkpointing=recompute)
    own = mode_estimate(*ARGS, 16, calibration=Scalars.fitted(resolved, "the priors resolved by this test"), **kw)
    assert shared.summary["mean_stages_s"] == own.summary["mean_stages_s"]
    assert shared.summary["mean_step_s"] == own.summary["mean_step_s"]
