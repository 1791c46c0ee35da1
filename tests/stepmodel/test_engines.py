"""The engine setting's own per-iteration costs (``polytrace/stepmodel/engines.py``): LoRA served by
vLLM in eager mode adds its Triton launches to every decode iteration; under CUDA graphs it adds
nothing; without an adapter nothing changes. Exact to the cited figures, so a miscounted launch,
a wrong per-launch price or an adapter priced under CUDA graphs fails here."""

from __future__ import annotations

import numpy as np
import pytest

from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.run.spec import Rollout
from polytrace.stepmodel import engines as E
from polytrace.stepmodel.efficiency import DEFAULT
from polytrace.stepmodel.rollout import iteration_launch_seconds, simulate_engine
from polytrace.stepmodel.stages import RunConfig, stage_costs

SMALL = get_model("qwen2.5-0.5b")
MOE = get_model("qwen3-30b-a3b")
H100 = get_gpu("h100")
EAGER, GRAPHS = Rollout(rollout_tp=1, eager=True), Rollout(rollout_tp=1, eager=False)


def test_cited_figures():
    assert E.TRITON_LAUNCH_S == 49e-6  # triton-lang/triton pull request #3638
    # dense: qkv, o, gate_up, down, each a shrink and an expand (Triton) and a buffer zeroing (torch)
    assert E.lora_launch_seconds_per_layer(SMALL, 32) == pytest.approx(4 * (2 * 49e-6 + 8e-6), rel=1e-12)
    # MoE: the attention's two projections only
    assert MOE.experts and E.lora_launch_seconds_per_layer(MOE, 32) == pytest.approx(2 * (2 * 49e-6 + 8e-6), rel=1e-12)
    assert E.lora_launch_seconds_per_layer(SMALL, 0) == 0.0
    assert E.rollout_efficiency(DEFAULT, SMALL, lora_rank=0) is DEFAULT


def test_eager_launches_carry_the_adapter_and_graphs_do_not():
    eff = E.rollout_efficiency(DEFAULT, SMALL, lora_rank=32)
    base = iteration_launch_seconds(SMALL, DEFAULT, eager=True)
    assert base == pytest.approx(SMALL.layers * 12 * 8e-6, rel=1e-12)
    assert iteration_launch_seconds(SMALL, eff, eager=True) - base == pytest.approx(SMALL.layers * 424e-6, rel=1e-9)
    assert iteration_launch_seconds(SMALL, eff, eager=False) == iteration_launch_seconds(SMALL, DEFAULT, eager=False)


def test_a_small_models_iterations_pay_every_adapter_launch():
    """Qwen2.5-0.5B's decode iteration is ~0.4 ms of device work against 2.3 ms of base launches:
    the launches are exposed, so the adapter adds layers x 424 us to every iteration, exactly."""
    p, r = np.full(64, 200), np.linspace(10, 300, 64).astype(int)
    plain = simulate_engine(SMALL, H100, p, r, engine=EAGER, eff=DEFAULT)
    lora = simulate_engine(SMALL, H100, p, r, engine=EAGER, eff=E.rollout_efficiency(DEFAULT, SMALL, lora_rank=32))
    assert lora.iterations == plain.iterations == 300
    extra = lora.kernels["host"] - plain.kernels["host"]
    assert extra == pytest.approx(300 * SMALL.layers * 424e-6, rel=1e-9)
    assert {k: v for k, v in lora.kernels.items() if k != "host"} == pytest.approx(
        {k: v for k, v in plain.kernels.items() if k != "host"}, rel=1e-12)
    graphs = simulate_engine(SMALL, H100, p, r, engine=GRAPHS,
                             eff=E.rollout_efficiency(DEFAULT, SMALL, lora_rank=32))
    assert graphs.kernels == pytest.approx(simulate_engine(SMALL, H100, p, r, engine=GRAPHS, eff=DEFAULT).kernels,
                                           rel=1e-12)


@pytest.mark.parametrize("eager", [True, False])
def test_stage_costs_price_the_rollouts_adapter(eager):
    base = dict(model=SMALL, gpu=H100, n_gpus=2, prompts_per_step=16, n=4, max_prompt_len=256,
                max_response_len=256, rollout_tp=2, eager=eager)
    p, r = np.full(64, 200), np.linspace(10, 256, 64).astype(int)
    host = {rank: sum(x.seconds for x in stage_costs(RunConfig(**base, lora_rank=rank), p, r).parts
                      if x.stage == "gen" and x.family == "host") for rank in (0, 32)}
    if eager:
        assert host[32] - host[0] == pytest.approx(256 * SMALL.layers * 424e-6, rel=1e-9)
    else:
        assert host[32] == host[0]
