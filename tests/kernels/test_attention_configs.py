"""Varlen attention and decode with each GPU's default tiles and split counts, in the interpreter.

The other CPU tests run the interpreter's 16x16 tiles and at most a few decode splits; a GPU picks
``default_fwd_config`` / ``default_bwd_config`` / ``default_decode_config`` for its capability
(forward 128x64 or 64x32; dK/dV 64x32 on sm_90, 64x64 on sm_80 at D=128, 32x32 at D > 128; dQ steps of 32-64 keys;
decode blocks of 64 keys and up to 64 splits chosen from the SM count), which would otherwise first
run on a GPU. Each distinct config of sm_80 and sm_90 runs here on fp16 shapes that span several of
its tiles, against fp64 with the tolerance rules; configs that differ only in warps or stages (which
the interpreter ignores: the same programs, bit for bit) run once there, with the first arch's values.
"""

from __future__ import annotations

import math

import pytest
import torch
from _bounds import attention_lse_scale, expect, sixteen_bit_checks
from _footprint import watch_kernels
from test_attention import check_decode, check_varlen

from polytrace_kernels._interpreter import interpreting
from polytrace_kernels.attention import (
    choose_split_tokens,
    default_bwd_config,
    default_decode_config,
    default_fwd_config,
    varlen_attention,
    varlen_attention_reference,
)
from polytrace_kernels.attention.api import MIN_SPLIT_TOKENS
from polytrace_kernels.tolerance import check_fp32

CAPABILITIES = {"sm80": (8, 0), "sm90": (9, 0)}
NUM_SMS = {"sm80": 108, "sm90": 132}  # A100, H100/H200: what choose_split_tokens sees on those GPUs
HEAD_DIMS = (32, 128, 160)  # the three head-dim buckets (<= 64, <= 128, > 128; 160 is not a power of two)


# launch options, no tile: the interpreter runs the same programs whatever they are (at D=32 sm_80
# and sm_90 differ only in DKDV_STAGES 1 vs 3: one interpreter run of ~2 CPU-s, not two)
NOT_IN_THE_INTERPRETER = ("num_warps", "num_stages", "DKDV_WARPS", "DKDV_STAGES", "DQ_WARPS", "DQ_STAGES")


def _varlen_params():
    params = []
    for d in HEAD_DIMS:
        seen = {}
        for name, cap in CAPABILITIES.items():
            cfg = (default_fwd_config(d, torch.float16, capability=cap),
                   default_bwd_config(d, torch.float16, capability=cap))
            blind = NOT_IN_THE_INTERPRETER if interpreting() else ()  # on a GPU every option counts
            tiles = [sorted((k, v) for k, v in c.items() if k not in blind) for c in cfg]
            seen.setdefault(repr(tiles), (cfg, []))[1].append(name)
        for cfg, names in seen.values():
            params.append(pytest.param(d, *cfg, id=f"d{d}-{'+'.join(names)}"))
    return params


def _cu(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32)


@pytest.mark.parametrize("head_dim,fwd,bwd", _varlen_params())
def test_varlen_with_gpu_default_tiles(head_dim, fwd, bwd):
    assert fwd["BLOCK_M"] >= 64 and bwd["DKDV_BLOCK_N"] >= 32  # GPU tiles, not the interpreter's 16x16
    # a sequence over two forward tiles and three dK/dV tiles, one exactly one tile, empty and
    # one-token sequences, and a query shorter than its keys (bottom-right causal offset)
    lens_q = [130, 0, 1, 64, 10, 33]
    lens_k = [130, 0, 1, 64, 70, 33]
    hq, hkv = 2, 1
    gen = torch.Generator().manual_seed(head_dim)
    q = torch.randn(sum(lens_q), hq, head_dim, generator=gen).half().requires_grad_()
    k = torch.randn(sum(lens_k), hkv, head_dim, generator=gen).half().requires_grad_()
    v = torch.randn(sum(lens_k), hkv, head_dim, generator=gen).half().requires_grad_()
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    with watch_kernels() as rec:
        out, lse = varlen_attention(q, k, v, cu_q, cu_k, causal=True, return_lse=True, config=fwd, bwd_config=bwd)
        dout = torch.randn(out.shape, generator=gen).half()
        grads = torch.autograd.grad(out, (q, k, v), dout)
    assert rec.one("varlen_fwd_kernel").args["BLOCK_M"] == fwd["BLOCK_M"]
    dkdv = rec.one("varlen_bwd_dkdv_kernel").args
    assert (dkdv["BLOCK_M"], dkdv["BLOCK_N"]) == (bwd["DKDV_BLOCK_M"], bwd["DKDV_BLOCK_N"])
    assert rec.one("varlen_bwd_dq_kernel").args["BLOCK_N"] == bwd["DQ_BLOCK_N"]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = varlen_attention_reference(q64, k64, v64, cu_q, cu_k, return_lse=True,
                                              compute_dtype=torch.float64)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    same = varlen_attention_reference(q, k, v, cu_q, cu_k, compute_dtype=torch.float16)
    same_grads = torch.autograd.grad(same, (q, k, v), dout)
    scale, most = attention_lse_scale(q, k, cu_q, cu_k, True, 1.0 / math.sqrt(head_dim))
    checks = [check_fp32("lse", lse, ref_lse, terms=most, scale=scale)]
    for name, ours, exact, torch_same in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads),
                                             (same, *same_grads)):
        checks += sixteen_bit_checks(name, ours, torch_same, exact.detach())
    expect(*checks)


def test_softcap_window_with_the_hopper_ext_tiles():
    """The softcap + window launch's own dK/dV tile on Hopper (16 query rows x 128 keys, where the
    plain kernels take 32: 0 B spilled on triton 3.6), run in the interpreter against fp64: a
    sequence over two key tiles, one a tile long and short ones, softcap 5 so tanh bends the scores."""
    bwd = default_bwd_config(128, torch.float16, capability=(9, 0), ext=True)
    assert (bwd["DKDV_BLOCK_M"], bwd["DKDV_BLOCK_N"]) == (16, 128)
    assert default_bwd_config(128, torch.float16, capability=(9, 0))["DKDV_BLOCK_M"] == 32
    lens = [150, 1, 128, 9]
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(sum(lens), h, 128, generator=gen).half() for h in (2, 1, 1))
    with watch_kernels() as rec:
        check_varlen(q, k, v, _cu(lens), _cu(lens), True, softcap=5.0, window_size=(40, 0),
                     config=default_fwd_config(128, torch.float16, capability=(9, 0)), bwd_config=bwd)
    dkdv = rec.one("varlen_bwd_dkdv_ext_kernel").args
    assert (dkdv["BLOCK_M"], dkdv["BLOCK_N"]) == (16, 128)


def _decode_params():
    params = []
    for d in (64, 256):
        seen = {}
        for name, cap in CAPABILITIES.items():
            cfg = default_decode_config(d, capability=cap)
            seen.setdefault(repr(sorted(cfg.items())), (cfg, []))[1].append(name)
        for cfg, names in seen.values():
            params.append(pytest.param(d, cfg, names[-1], id=f"d{d}-{'+'.join(names)}"))
    return params


@pytest.mark.parametrize("head_dim,cfg,gpu", _decode_params())
def test_decode_with_gpu_default_split_count(head_dim, cfg, gpu):
    """The split size a GPU picks from its SM count for a tiny batch (two sequences, one KV head:
    two programs per SM need 66-132 splits of a 16k cache at D=64, 32 of 128 tokens for a 4k cache
    at D=256), one long and one short sequence, GQA 4; the combine kernel merges every partial."""
    assert cfg["SPLIT_TOKENS"] == 0 and cfg["BLOCK_N"] >= 32  # chosen at launch, GPU blocks
    max_len = 16384 if head_dim == 64 else 4096
    lens, hq, hkv = [max_len, 700], 4, 1
    sms = NUM_SMS[gpu]
    split = choose_split_tokens(len(lens), hkv, max_len, cfg["BLOCK_N"], sms)
    n_splits = -(-max_len // split)
    assert split % cfg["BLOCK_N"] == 0 and split >= MIN_SPLIT_TOKENS
    # two programs per SM, or splits already at the floor
    assert len(lens) * hkv * n_splits >= 2 * sms or split <= max(MIN_SPLIT_TOKENS, cfg["BLOCK_N"])
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(len(lens), hq, head_dim, generator=gen).half()
    kc = torch.randn(len(lens), max_len, hkv, head_dim, generator=gen).half()
    vc = torch.randn(len(lens), max_len, hkv, head_dim, generator=gen).half()
    with watch_kernels() as rec:
        check_decode(q, kc, vc, torch.tensor(lens, dtype=torch.int32), config={**cfg, "SPLIT_TOKENS": split})
    assert rec.one("decode_split_kernel").grid == (n_splits, len(lens) * hkv)
    assert rec.one("decode_combine_kernel").args["N_SPLITS_POW2"] == n_splits


def _paged_inputs(lens, pages_per_seq, page, hq, hkv, d, seed):
    """fp16 query and a page pool in a shuffled order, with its block table ``[B, pages_per_seq]``."""
    gen = torch.Generator().manual_seed(seed)
    n_pages = len(lens) * pages_per_seq
    table = torch.randperm(n_pages, generator=gen).reshape(len(lens), pages_per_seq).to(torch.int32)
    kp = torch.randn(n_pages, page, hkv, d, generator=gen).half()
    vp = torch.randn(n_pages, page, hkv, d, generator=gen).half()
    q = torch.randn(len(lens), hq, d, generator=gen).half()
    return q, kp, vp, table


def test_decode_many_splits_paged_with_gpu_blocks():
    """Paged cache (16-token pages, so a 64-key block spans four pages) split 32 ways."""
    cfg = default_decode_config(64, capability=(9, 0))
    num_splits = 32
    lens, page, hkv, hq, d = [2000, 17, 0, 700], 16, 2, 4, 64
    pages_per_seq = 2048 // page
    q, kp, vp, table = _paged_inputs(lens, pages_per_seq, page, hq, hkv, d, seed=5)
    with watch_kernels() as rec:
        check_decode(q, kp, vp, torch.tensor(lens, dtype=torch.int32), block_table=table, num_splits=num_splits,
                     config={"BLOCK_N": cfg["BLOCK_N"], "num_stages": cfg["num_stages"]})
    assert rec.one("decode_split_kernel").grid[0] == num_splits


@pytest.mark.parametrize("batch, max_len, split, why", [
    (1, 1500, 128, "late rollout: 6 splits of 256 gave 48 programs; 12 of 128 give 96 (floor reached)"),
    (4, 3000, 256, "4 x 8 rows x 12 splits = 384 programs >= 2 per SM"),
    (11, 3300, 256, "large enough for the 256-2048 rule"),
    (128, 2048, 2048, "1024 rows >= 4 waves of programs: one split per row, one launch"),
    (256, 8192, 2048, "caches past 4096 tokens keep splitting (one long row would be the makespan)"),
    (2, 100, 128, "a cache shorter than a split: one split, one launch"),
])
def test_decode_splits_follow_sm_count_and_length(batch, max_len, split, why):
    assert choose_split_tokens(batch, 8, max_len, 64, 132) == split, why


def test_decode_many_rows_run_in_a_single_launch():
    """Rows >= 4 x SMs (the interpreter's device reports 8 SMs): one split per row and no combine
    launch, with the same results as the split path."""
    gen = torch.Generator().manual_seed(11)
    batch, hkv, hq, d, max_len = 8, 4, 8, 16, 40
    q = torch.randn(batch, hq, d, generator=gen).half()
    kc = torch.randn(batch, max_len, hkv, d, generator=gen).half()
    vc = torch.randn(batch, max_len, hkv, d, generator=gen).half()
    lens = torch.tensor([40, 3, 17, 0, 33, 40, 1, 25], dtype=torch.int32)
    with watch_kernels() as rec:
        check_decode(q, kc, vc, lens, config={"SPLIT_TOKENS": 0})
    assert rec.one("decode_split_kernel").grid == (1, batch * hkv)
    assert rec.of("decode_combine_kernel") == []


# ---- tuning candidates that fit shared memory (a pure function: no compile) ----------------

def test_fwd_shared_bytes_matches_the_compiled_tiles():
    # triton.compile metadata for sm_90a (triton 3.9, bf16), results/static/triton-3.9.0.json
    from polytrace_kernels.attention.configs import fwd_shared_bytes

    cases = [({"BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 3}, 128, 128 * 1024),
             ({"BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 3}, 64, 64 * 1024),
             ({"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 3}, 128, 112 * 1024),
             ({"BLOCK_M": 64, "BLOCK_N": 32, "num_stages": 1}, 256, 48 * 1024)]
    for cfg, d, want in cases:
        assert fwd_shared_bytes(cfg, d, torch.bfloat16) == want, (cfg, d)
    assert fwd_shared_bytes({"BLOCK_M": 64, "BLOCK_N": 32, "num_stages": 2}, 128, torch.float32) == 96 * 1024


@pytest.mark.parametrize("d, cap, dropped", [(64, (9, 0), 0), (128, (9, 0), 4), (256, (9, 0), 18),
                                             (128, (8, 0), 8), (128, (8, 6), 20), (128, (8, 9), 20)])
def test_tuning_candidates_drop_what_cannot_fit(d, cap, dropped):
    from polytrace_kernels.attention.configs import (
        TUNING_SPACE,
        fwd_shared_bytes,
        smem_per_block,
        tuning_candidates,
    )

    total = math.prod(len(v) for v in TUNING_SPACE.values())
    kept = tuning_candidates(d, torch.bfloat16, cap)
    assert total == 36 and len(kept) == total - dropped
    limit = smem_per_block(cap)
    assert all(fwd_shared_bytes(c, d) <= limit for c in kept)
    # the largest tile kept at D=128 on sm_90: 128x128 with 3 stages (224 KB of 227); 4 stages do not fit
    if (d, cap) == (128, (9, 0)):
        big = {"BLOCK_M": 128, "BLOCK_N": 128}
        assert any(c.items() >= dict(big, num_stages=3).items() for c in kept)
        assert not any(c.items() >= dict(big, num_stages=4).items() for c in kept)


def test_tune_drops_candidates_that_cannot_fit_before_compiling(tmp_path):
    """A shape's ``fits`` drops a candidate before any launch: never built, not counted as tried or failed."""
    from polytrace.measure.tuning import session as tune

    calls = []

    def shapes(ctx):
        def build(device):
            def launch(config):
                calls.append(config)
                return torch.ones(4)
            return launch
        return [tune.TuneShape("b0", "toy", 1.0, build, lambda cfg, device: cfg["X"] != 2)]

    toy = tune.Tunable("toy_kernel", "attention", "toy", "polytrace_kernels.attention.api", shapes,
                       fixed_space={"X": [1, 2, 3]})
    session = tune.run_session(toy, target=tune.TuneTarget(profile="deepcoder-14b"), budget_s=30, root=tmp_path,
                               progress=False)
    assert session.tried == 2 and session.failed == 0
    assert {c["X"] for c in calls if c is not None} == {1, 3}
    runner = tune.BucketRunner(toy, shapes(None), "cpu", lambda fn: 1.0)
    assert runner.trial({"X": 2}) == math.inf and calls[-1] != {"X": 2}  # --ray's path: inf, not launched


def test_attention_tune_shapes_ask_config_fits_with_the_device_capability(monkeypatch):
    """The varlen_attention_fwd tunable's shapes drop exactly what config_fits drops at the device's
    capability: at D=128 on sm_90, 128x128 with 4 stages (256 KB) but not with 3 (224 KB)."""
    from polytrace.measure.tuning import measure, tunables
    from polytrace_kernels.attention import api

    seen = []
    real = api.config_fits

    def spy(cfg, d, dtype, cap):
        seen.append((d, dtype, cap))
        return real(cfg, 128, torch.bfloat16, cap)

    monkeypatch.setattr(api, "config_fits", spy)
    monkeypatch.setattr(api, "device_capability", lambda device: (9, 0))
    work = measure.build_workload(tunables.get_tunable("varlen_attention_fwd"), "deepcoder-14b", None, 0, False, "cpu")
    shape = next(iter(work.buckets.values()))[0]
    big = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8}
    assert shape.fits(dict(big, num_stages=3), "cpu") and not shape.fits(dict(big, num_stages=4), "cpu")
    assert seen == [(16, torch.float16, (9, 0))] * 2  # the shape's head dim and dtype (CPU: 16, fp16)


@pytest.mark.parametrize("page", [8, 64])
def test_paged_decode_over_many_block_table_chunks(monkeypatch, page):
    """The paged split reads its block-table slice a chunk at a time: chunks of 32 tokens here
    (4 pages of 8, or one page of 64 rounded to a whole page), splits of 48 tokens (so a split
    starts inside a chunk, and inside a page of 64) and 16-key tiles: every key is counted once."""
    from polytrace_kernels.attention import api

    monkeypatch.setattr(api, "DECODE_CHUNK_TOKENS", 32)
    lens, hkv, hq, d, max_pages = [190, 47, 0, 64, 1], 1, 2, 16, 256 // page
    q, kp, vp, table = _paged_inputs(lens, max_pages, page, hq, hkv, d, seed=11)
    with watch_kernels() as rec:
        check_decode(q, kp, vp, torch.tensor(lens, dtype=torch.int32), block_table=table,
                     config={"BLOCK_N": 16, "SPLIT_TOKENS": 48})
    args = rec.one("decode_split_kernel").args
    assert args["CHUNK_PAGES"] == {8: 4, 64: 1}[page] and rec.one("decode_split_kernel").grid[0] == 6
