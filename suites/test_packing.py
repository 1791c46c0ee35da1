"""Packing suite: planner speed and balance on sampled batches, pack/unpack bandwidth.

Planner cases time ``balance_partitions`` / ``plan_microbatches`` for 8 ranks on one sampled step
of every built-in profile, plus an 8192-sequence batch (model-b-math, 512 prompts x 16): the
issue's goal is under 20 ms on one core for that one. Planning is CPU work, so its timings are real
CPU measurements on whatever machine runs the suite (``extra_info['measured_on_cpu']``). verl's
planner is timed beside ours when installed.

pack/unpack cases time the Triton kernels and torch boolean-mask indexing on micro-batches from
``suites/shapes.py``: hidden width 4096 bf16 on a GPU (GB/s and % of HBM peak), tiny interpreter
shapes on CPU (code path only).
"""

from __future__ import annotations

import numpy as np
import pytest

from polytrace_kernels.packing import balance_partitions, plan_microbatches, plan_stats
from polytrace_kernels.packing import spec as packing_spec
from suites import harness, shapes
from suites.harness import Case, Provider

RANKS = 8
PLANNER_PROFILES = ("dapo-math-32b", "deepcoder-14b", "video-vl-7b", "search-r1-7b", "model-b-math",
                    "model-b-tooluse")
BIG_BATCH = ("model-b-math", 512)  # 512 prompts x 16 responses = 8192 sequences

PLANNERS = [
    Provider("ours", kind="ours"),
    Provider("verl", available=lambda: __import__("polytrace.packcompare", fromlist=["x"]).verl_unavailable()),
]


def _seqlens(profile: str, prompts: int | None = None) -> np.ndarray:
    from polytrace.profiles import get_profile

    return np.asarray(get_profile(profile).sample(step=0, seed=0, prompts=prompts).seq_lens, dtype=np.int64)


def _planner_cases():
    cases = [(p, None) for p in PLANNER_PROFILES] + [BIG_BATCH]
    return [pytest.param(p, n, id=f"{p}" + (f"-{n}prompts" if n else "")) for p, n in cases]


@pytest.mark.parametrize("provider", PLANNERS, ids=lambda p: p.name)
@pytest.mark.parametrize("profile, prompts", _planner_cases())
def test_balance_ranks(benchmark, provider, profile, prompts):
    """Ranks only: 8-way balance by attention cost (verl's workload model)."""
    harness.skip_unavailable(provider)
    seqlens = _seqlens(profile, prompts)
    if provider.name == "ours":
        fn = lambda: balance_partitions(seqlens, RANKS, cost="attention")
    else:
        from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

        workloads = (24576 * seqlens + seqlens * seqlens).tolist()
        fn = lambda: get_seqlen_balanced_partitions(workloads, RANKS, equal_size=False)
    case = Case(family="packing", kernel="balance_partitions", provider=provider.name, mode="plan",
                shape={"profile": profile, "sequences": int(seqlens.size), "ranks": RANKS}, profile=profile,
                seed=0, step=0)
    parts = harness.run(benchmark, fn, case, rounds=5 if harness.on_gpu() else 3)
    report = plan_stats(seqlens, parts, "attention")
    benchmark.extra_info.update(imbalance=report.imbalance, gap=report.gap, measured_on_cpu=True)
    assert sorted(i for p in parts for i in p) == list(range(seqlens.size))


@pytest.mark.parametrize("profile, prompts", _planner_cases())
def test_plan_microbatches(benchmark, profile, prompts):
    seqlens = _seqlens(profile, prompts)
    budget = max(shapes.GPU_MAX_TOKENS, int(seqlens.max()))
    case = Case(family="packing", kernel="plan_microbatches", provider="ours", mode="plan",
                shape={"profile": profile, "sequences": int(seqlens.size), "ranks": RANKS, "max_tokens": budget},
                profile=profile, seed=0, step=0)
    plan = harness.run(benchmark, lambda: plan_microbatches(seqlens, RANKS, budget), case, rounds=3)
    benchmark.extra_info.update(imbalance=plan.imbalance, gap=plan.gap, n_microbatches=plan.n_microbatches,
                                lockstep_imbalance=plan.lockstep_imbalance, measured_on_cpu=True)
    assert plan.max_microbatch_tokens <= budget


# ---------------------------------------------------------------------------------------------
# pack / unpack bandwidth
# ---------------------------------------------------------------------------------------------

KERNELS = [Provider("ours", kind="ours"), Provider("torch", kind="baseline")]
PACK_PROFILES = ("dapo-math-32b", "search-r1-7b")


def _pack_shapes():
    out = []
    for profile in PACK_PROFILES:
        for mb in shapes.microbatches(profile, max_batches=2):
            out.append(pytest.param(mb, id=mb.label))
    return out


@pytest.mark.parametrize("provider", KERNELS, ids=lambda p: p.name)
@pytest.mark.parametrize("direction", ["pack", "unpack"])
@pytest.mark.parametrize("mb", _pack_shapes())
def test_pack_unpack(benchmark, provider, direction, mb):
    import torch

    from polytrace_kernels.packing import pack, unpack
    from polytrace_kernels.packing.reference import pack_reference, unpack_reference

    harness.skip_unavailable(provider)
    gpu = harness.on_gpu()
    lens = mb.seqlens if gpu else shapes.cpu_scale(mb.seqlens)
    hidden = 4096 if gpu else 32
    dtype = torch.bfloat16
    dev = harness.device()
    B, S, T = int(lens.size), int(lens.max()), int(lens.sum())
    lengths = torch.as_tensor(lens, device=dev)
    padded = torch.randn(B, S, hidden, device=dev).to(dtype)
    packed, cu, _ = pack_reference(padded, lengths)
    if direction == "pack":
        fn = (lambda: pack(padded, lengths, total_tokens=T, max_seqlen=S)) if provider.name == "ours" \
            else (lambda: pack_reference(padded, lengths))
        nbytes = packing_spec.pack_bytes(T, B, (hidden,), 2)
    else:
        fn = (lambda: unpack(packed, cu, S)) if provider.name == "ours" else (lambda: unpack_reference(packed, cu, S))
        nbytes = packing_spec.unpack_bytes(T, B, S, (hidden,), 2)
    case = Case(family="packing", kernel=direction, provider=provider.name, mode="fwd",
                shape={"mb": mb.label, "B": B, "max_len": S, "T": T, "hidden": hidden, "dtype": "bf16"},
                bytes_moved=nbytes, profile=mb.profile, seed=mb.seed, step=mb.step, weight=mb.weight)
    result = harness.run(benchmark, fn, case)
    got = result[0] if direction == "pack" else result
    want = packed if direction == "pack" else unpack_reference(packed, cu, S)
    assert torch.equal(got, want)
