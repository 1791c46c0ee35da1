"""Write footprints: each program of each kernel writes exactly its own output elements.

The interpreter runs programs one after another, so a program writing one row too many is hidden
when a later program overwrites that row with the right value; on a GPU the two race. For every
kernel (pack, unpack, attention forward, backward dQ / dK,dV / delta, decode split partials and
combine, the log-prob kernels) a normal call runs under ``watch_kernels`` (``tests/_footprint.py``),
which records each program's stores; then every written element must belong to a declared output,
no element may be written by two programs, every expected element must be written, and each
program's elements must be exactly the ones its tile owns (from the kernel's documented program ->
tile mapping and the sequence offsets).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _footprint import watch_kernels

from polytrace_kernels.attention import decode_attention, default_bwd_config, default_fwd_config, varlen_attention
from polytrace_kernels.logprob import linear_token_logprobs, token_logprobs
from polytrace_kernels.packing import pack, unpack


def _flat(shape, *index_arrays) -> np.ndarray:
    """Flat indices of the (broadcast) index grid into a contiguous tensor of ``shape``."""
    grids = np.broadcast_arrays(*[np.asarray(i, dtype=np.int64) for i in index_arrays])
    return np.ravel_multi_index([g.reshape(-1) for g in grids], shape) if grids[0].size else np.zeros(0, np.int64)


def _blocks(start, stop, block, i):
    lo = start + i * block
    return np.arange(lo, min(lo + block, stop))


# ------------------------------------------------------------------------------------- packing


@pytest.mark.parametrize("features", [1, 5, 300])
def test_pack_and_unpack_programs_write_their_own_rows(features):
    lengths = [37, 0, 1, 16, 17, 40]
    S = 40
    padded = torch.randn(len(lengths), S, features)
    with watch_kernels() as rec:
        packed, cu, _ = pack(padded, torch.tensor(lengths))
        unpack(packed, cu, S + 3)
    cu_l = cu.tolist()
    launch = rec.one("_pack_kernel")
    bt, bf = launch.args["BLOCK_T"], launch.args["BLOCK_F"]
    assert launch.grid[1] > 1 or bt >= S  # rows of a sequence span several programs when the block allows

    def pack_owner(p):
        b, t, f = p
        rows = cu_l[b] + _blocks(0, lengths[b], bt, t)
        return {"packed_ptr": _flat(packed.shape, rows[:, None], _blocks(0, features, bf, f)[None, :])}

    launch.assert_footprint(["packed_ptr"], owner=pack_owner)
    launch = rec.one("_unpack_kernel")
    out_shape = (len(lengths), S + 3, features)

    def unpack_owner(p):
        b, t, f = p
        rows = _blocks(0, S + 3, bt, t)
        return {"padded_ptr": _flat(out_shape, b, rows[:, None], _blocks(0, features, bf, f)[None, :])}

    launch.assert_footprint(["padded_ptr"], owner=unpack_owner)


@pytest.mark.parametrize("features", [1, 300])
def test_trusted_offsets_past_the_total_stay_inside_the_buffers(features):
    """With lengths on the GPU, ``total_tokens`` and the sequence offsets are trusted (no sync): a
    total smaller than the lengths' sum gives a wrong result, never a store or read outside the T
    packed rows. Lengths 5 + 9 + 7 = 21 into T = 16: the third sequence's rows 2-6 and the second's
    none fall past it (cu 0, 5, 14, 21)."""
    from polytrace_kernels.packing.api import _launch_pack, _launch_unpack

    lengths, total, S = [5, 9, 7], 16, 9
    cu = torch.tensor([0, 5, 14, 21], dtype=torch.int32)
    padded = torch.randn(len(lengths), S, features)
    with watch_kernels() as rec:
        packed = _launch_pack(padded, cu, total, None)
    launch = rec.one("_pack_kernel")
    bt, bf = launch.args["BLOCK_T"], launch.args["BLOCK_F"]

    def pack_owner(p):
        b, t, f = p
        rows = int(cu[b]) + _blocks(0, lengths[b], bt, t)
        return {"packed_ptr": _flat(packed.shape, rows[rows < total][:, None], _blocks(0, features, bf, f)[None, :])}

    launch.assert_footprint(["packed_ptr"], owner=pack_owner)
    out = _launch_unpack(packed, cu, S, None)
    for b, n in enumerate(lengths):
        src = int(cu[b]) + np.arange(S)
        inside = (np.arange(S) < n) & (src < total)
        assert torch.equal(out[b, torch.from_numpy(inside)], packed[src[inside]]), b
        assert (out[b, torch.from_numpy(~inside)] == 0).all(), b  # past T or past the length: zeros


@pytest.mark.parametrize("features", [1, 300])
def test_trusted_lengths_past_the_padded_width_stay_in_their_own_rows(features):
    """A trusted device length may exceed S (the padded width; only a host check would see it): pack
    copies the S rows the sequence has and no more, never the next sequence's padded rows (row S of
    sequence b is row 0 of b + 1) and, for the last sequence, never past the buffer. Lengths 9 and
    4 over S = 6 (cu 0, 9, 13): rows 6-8 of the first sequence are not written."""
    from polytrace_kernels.packing.api import _launch_pack

    lengths, S = [9, 4], 6
    cu = torch.tensor([0, 9, 13], dtype=torch.int32)
    padded = torch.randn(len(lengths), S, features)
    with watch_kernels() as rec:
        packed = _launch_pack(padded, cu, 13, None)
    launch = rec.one("_pack_kernel")
    bt, bf = launch.args["BLOCK_T"], launch.args["BLOCK_F"]

    def pack_owner(p):
        b, t, f = p
        rows = int(cu[b]) + _blocks(0, min(lengths[b], S), bt, t)
        return {"packed_ptr": _flat(packed.shape, rows[:, None], _blocks(0, features, bf, f)[None, :])}

    written = torch.ones(packed.shape, dtype=torch.bool)
    written[S:9] = False  # rows 6-8: the first sequence has no padded rows for them
    launch.assert_footprint(["packed_ptr"], owner=pack_owner, expected={"packed_ptr": written})
    assert torch.equal(packed[:S], padded[0]) and torch.equal(packed[9:13], padded[1, :4])


# ----------------------------------------------------------------------------------- attention


def _varlen_run(lens_q, lens_k, hq, hkv, d, schedule, fwd=None, bwd=None):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(sum(lens_q), hq, d, generator=gen).half().requires_grad_()
    k = torch.randn(sum(lens_k), hkv, d, generator=gen).half().requires_grad_()
    v = torch.randn(sum(lens_k), hkv, d, generator=gen).half().requires_grad_()
    cu_q = torch.tensor(np.cumsum([0, *lens_q]), dtype=torch.int32)
    cu_k = torch.tensor(np.cumsum([0, *lens_k]), dtype=torch.int32)
    with watch_kernels() as rec:
        out = varlen_attention(q, k, v, cu_q, cu_k, causal=True, schedule=schedule, config=fwd, bwd_config=bwd)
        out.float().sum().backward()
    return rec, cu_q.tolist(), cu_k.tolist(), q, k


def _tile_owner(args, seq_of, blk_of, cu, block, heads, head_of, outputs):
    """Owner of a (sequence, block, head) tile: rows cu[seq] + block*BLOCK .. of its sequence."""
    work_seq, work_block = args[seq_of].tolist(), args[blk_of].tolist()

    def owner(p):
        slot, head = head_of(p[0])
        seq = work_seq[slot]
        if seq < 0:
            return {}
        rows = _blocks(cu[seq], cu[seq + 1], block, work_block[slot])
        return {name: fn(rows, head) for name, fn in outputs.items()}
    return owner


@pytest.mark.parametrize("schedule", ["longest_first", "naive"])
@pytest.mark.parametrize("tiles", ["interpreter", "sm90"])
def test_attention_programs_write_their_own_tiles(schedule, tiles):
    fwd = bwd = None
    d = 32
    if tiles == "sm90":
        fwd, bwd = default_fwd_config(d, capability=(9, 0)), default_bwd_config(d, capability=(9, 0))
    lens_q = [40, 0, 17, 1, 16, 70] if tiles == "interpreter" else [130, 0, 1, 64, 20]
    lens_k = [40, 3, 17, 1, 30, 70] if tiles == "interpreter" else [130, 2, 1, 64, 70]
    # GQA 2 over one KV head: dK/dV's loop over the group's query heads is still there to write a
    # tile twice, and the interpreter's cost is per (tile, head) program (4 over 2 heads: twice this)
    hq, hkv = 2, 1
    rec, cu_q, cu_k, q, k = _varlen_run(lens_q, lens_k, hq, hkv, d, schedule, fwd, bwd)
    tq, tk = q.shape[0], k.shape[0]

    launch = rec.one("varlen_fwd_kernel")
    a = launch.args
    n_slots = a["work_seq"].numel()
    inner = bool(a["HEADS_INNER"])
    owner = _tile_owner(a, "work_seq", "work_block", cu_q, a["BLOCK_M"], hq,
                        lambda pid: (pid // hq, pid % hq) if inner else (pid % n_slots, pid // n_slots),
                        {"O": lambda rows, h: _flat((tq, hq, d), rows[:, None], h, np.arange(d)[None, :]),
                         "LSE": lambda rows, h: _flat((hq, tq), h, rows)})
    launch.assert_footprint(["O", "LSE"], owner=owner)

    launch = rec.one("varlen_bwd_dq_kernel")
    a = launch.args
    owner = _tile_owner(a, "work_seq", "work_block", cu_q, a["BLOCK_M"], hq, lambda pid: (pid // hq, pid % hq),
                        {"DQ": lambda rows, h: _flat((tq, hq, d), rows[:, None], h, np.arange(d)[None, :])})
    launch.assert_footprint(["DQ"], owner=owner)

    launch = rec.one("varlen_bwd_dkdv_kernel")
    a = launch.args
    kv = {name: (lambda rows, h: _flat((tk, hkv, d), rows[:, None], h, np.arange(d)[None, :])) for name in ("DK", "DV")}
    owner = _tile_owner(a, "work_seq", "work_block", cu_k, a["BLOCK_N"], hkv, lambda pid: (pid // hkv, pid % hkv), kv)
    launch.assert_footprint(["DK", "DV"], owner=owner)

    launch = rec.one("bwd_preprocess_kernel")
    bt = launch.args["BLOCK_T"]
    launch.assert_footprint(["DELTA"], owner=lambda p: {"DELTA": _flat((hq, tq), p[1], _blocks(0, tq, bt, p[0]))})


@pytest.mark.parametrize("num_splits", [1, 3, 5])
@pytest.mark.parametrize("paged", [False, True])
def test_decode_programs_write_their_own_partials(num_splits, paged):
    lens = [40, 0, 1, 17, 32]  # 32: a whole number of 16-token splits, so the next split must stay idle
    hq, hkv, d, lmax, page = 6, 2, 16, 40, 8
    group = hq // hkv
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(len(lens), hq, d, generator=gen).half()
    if paged:
        n_pages = len(lens) * lmax // page
        table = torch.randperm(n_pages, generator=gen).reshape(len(lens), -1).to(torch.int32)
        kc = torch.randn(n_pages, page, hkv, d, generator=gen).half()
        extra = {"block_table": table}
    else:
        kc = torch.randn(len(lens), lmax, hkv, d, generator=gen).half()
        extra = {}
    with watch_kernels() as rec:
        decode_attention(q, kc, kc.flip(0), torch.tensor(lens, dtype=torch.int32), num_splits=num_splits, **extra)
    launch = rec.one("decode_split_kernel")
    split_tokens = int(launch.args["split_tokens"])
    n_splits = launch.grid[0]

    def heads(p):
        b, kv_head = divmod(p[1], hkv)
        return b, np.arange(kv_head * group, (kv_head + 1) * group)

    if n_splits == 1:
        def owner(p):
            b, h = heads(p)
            return {"O": _flat((len(lens), hq, d), b, h[:, None], np.arange(d)[None, :]),
                    "LSE_PART": _flat((len(lens), hq), b, h)}
        launch.assert_footprint(["O", "LSE_PART"], owner=owner)
        assert not rec.of("decode_combine_kernel")
        return

    active = np.array([[s == 0 or s * split_tokens < n for s in range(n_splits)] for n in lens])

    def owner(p):
        b, h = heads(p)
        if not active[b, p[0]]:
            return {}
        return {"O_PART": _flat((len(lens), hq, n_splits, d), b, h[:, None], p[0], np.arange(d)[None, :]),
                "LSE_PART": _flat((len(lens), hq, n_splits), b, h, p[0])}

    expected_parts = torch.from_numpy(np.repeat(active[:, None, :], hq, 1))
    launch.assert_footprint(["O_PART", "LSE_PART", "O"], owner=owner, expected={
        "O_PART": expected_parts[..., None].expand(-1, -1, -1, d).contiguous(), "LSE_PART": expected_parts,
        "O": torch.zeros(len(lens), hq, d, dtype=torch.bool)})  # the split kernel leaves O to the combine
    launch = rec.one("decode_combine_kernel")
    launch.assert_footprint(["O", "LSE"], owner=lambda p: {
        "O": _flat((len(lens), hq, d), p[0] // hq, p[0] % hq, np.arange(d)), "LSE": [p[0]]})


# ------------------------------------------------------------------------------------ log-prob


@pytest.mark.parametrize("vocab", [1031, 1024])
def test_logits_programs_write_their_own_rows(vocab):
    n_rows = 7
    x = torch.randn(n_rows, vocab).requires_grad_()
    tok = torch.tensor([1, 5, -100, 0, vocab - 1, 3, 9])
    with watch_kernels() as rec:
        lp, ent = token_logprobs(x, tok, 0.9, return_entropy=True, config={"BLOCK_V": 256},
                                 backward_config={"BLOCK_V": 256})
        (lp.sum() + ent.sum()).backward()
    name = "token_logprobs_fwd_kernel" + ("" if vocab % 16 == 0 else "_generic")
    rec.one(name).assert_footprint(["logprob_ptr", "entropy_ptr", "max_ptr", "logsum_ptr"], owner=lambda p: {
        "logprob_ptr": [p[0]], "entropy_ptr": [p[0]], "max_ptr": [p[0]], "logsum_ptr": [p[0]]})
    rec.one("token_logprobs_bwd_kernel").assert_footprint(["grad_logits_ptr"], owner=lambda p: {
        "grad_logits_ptr": _flat((n_rows, vocab), p[0], np.arange(vocab))})


def test_fused_programs_write_their_own_tiles():
    n_rows, vocab, hidden = 37, 300, 40
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(n_rows, hidden, generator=gen).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=gen) * 0.3).requires_grad_()
    tok = torch.randint(0, vocab, (n_rows,), generator=gen)
    with watch_kernels() as rec:
        lp, ent = linear_token_logprobs(h, w, tok, 0.8, True, chunk_bytes=n_rows * 4 * 96)
        (lp.sum() + ent.sum()).backward()
    launch = rec.one("linear_logprobs_fwd_kernel")
    nsplit, bt = launch.args["NSPLIT"], launch.args["BLOCK_T"]
    assert nsplit > 1
    launch.assert_footprint(["part_ptr"], owner=lambda p: {"part_ptr": _flat(
        (4, nsplit, n_rows), np.arange(4)[:, None], p[0] % nsplit, _blocks(0, n_rows, bt, p[0] // nsplit)[None, :])})
    launch = rec.one("linear_logprobs_combine_kernel")
    cbt = launch.args["BLOCK_T"]
    outs = ["logprob_ptr", "entropy_ptr", "max_ptr", "logsum_ptr"]
    launch.assert_footprint(outs, owner=lambda p: {name: _blocks(0, n_rows, cbt, p[0]) for name in outs})
    chunks = rec.of("linear_dlogits_kernel")
    assert len(chunks) > 1
    for launch in chunks:  # each chunk: its [T, cols] view exactly, disjoint tiles (grouped order)
        launch.assert_footprint(["dlogits_ptr"])
    for launch in rec.of("matmul_accumulate_kernel"):
        launch.assert_footprint(["c_ptr"])
