"""fp64 references for the attention suite's output checks, and the providers' layouts mapped back
to the packed one.

``attention_rows`` computes, from the same (16-bit) inputs the providers saw, the fp64 truth and
torch's own same-dtype result ("torch_same", the 16-bit rule's yardstick) with the kernels'
pure-torch reference (``polytrace_kernels.attention.reference``):

- the whole batch (every row; with ``dout``, dq, dk and dv) when ``rows`` is None;
- else the given query rows one at a time (each against the keys of its own sequence up to itself):
  the output and, with ``dout``, dq of those rows are exact per row; dk and dv sum over every
  later query row of the sequence, so they are computed for a sample of whole sequences
  (``sample_sequences``), exact for every token of those; when no sequence is small enough, for
  sampled key rows, each exact over every query of its sequence (``key_rows_exact``, chunked).
  That keeps a GPU-sized check (16k tokens, sequences of 32k: an fp64 score matrix of a whole
  sequence is 40 x 32k x 32k x 8 bytes) small.
"""

from __future__ import annotations


def _reference():
    from polytrace_kernels.attention.reference import varlen_attention_reference

    return varlen_attention_reference


def _cu(lengths, device):
    import torch

    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.cumsum(torch.tensor(lengths, device=device), 0)
    return cu


def _whole(q, k, v, seqlens, dout, compute_dtype):
    import torch

    ref = _reference()
    cast = (lambda t: t.double()) if compute_dtype == torch.float64 else (lambda t: t.clone())
    leaves = [cast(t).requires_grad_(dout is not None) for t in (q, k, v)]
    cu = _cu(seqlens, q.device)
    out = ref(*leaves, cu, cu, causal=True, compute_dtype=compute_dtype or q.dtype)
    if dout is None:
        return {"out": out.detach()}
    g = torch.autograd.grad(out, leaves, dout.to(out.dtype))
    return {"dq": g[0], "dk": g[1], "dv": g[2]}


def _rows(q, k, v, seqlens, rows, dout, compute_dtype):
    import torch

    ref = _reference()
    starts, acc = [], 0
    for n in seqlens:
        starts.append(acc)
        acc += n
    bounds = torch.tensor(starts[1:] + [acc])
    outs = []
    for r in rows.tolist():
        b = int(torch.searchsorted(bounds, r, right=True))
        s = starts[b]
        cast = (lambda t: t.double()) if compute_dtype == torch.float64 else (lambda t: t.clone())
        qr = cast(q[r:r + 1]).requires_grad_(dout is not None)
        kr, vr = cast(k[s:r + 1]), cast(v[s:r + 1])
        out = ref(qr, kr, vr, _cu([1], q.device), _cu([r + 1 - s], q.device), causal=True,
                  compute_dtype=compute_dtype or q.dtype)
        if dout is None:
            outs.append(out.detach())
        else:
            outs.append(torch.autograd.grad(out, qr, dout[r:r + 1].to(out.dtype))[0])
    key = "out" if dout is None else "dq"
    return {key: torch.cat(outs, 0)}


def token_index(seqlens, seqs, device=None):
    """The packed token positions of the sequences ``seqs`` (in that order)."""
    import torch

    starts, acc = [], 0
    for n in seqlens:
        starts.append(acc)
        acc += n
    return torch.cat([torch.arange(starts[i], starts[i] + seqlens[i]) for i in seqs]).to(device)


def _sequences(q, k, v, seqlens, seqs, dout, compute_dtype):
    """dk and dv of whole sequences ``seqs``: exact, since a sequence's K/V gradients depend only on
    its own queries (causal, no cross-sequence attention)."""
    idx = token_index(seqlens, seqs, q.device)
    sub = _whole(q[idx], k[idx], v[idx], [seqlens[i] for i in seqs], dout[idx], compute_dtype)
    return {"dk": sub["dk"], "dv": sub["dv"]}


def attention_rows(q, k, v, seqlens, rows=None, dout=None, seqs=None) -> dict:
    """``{"rows": rows, "want": {name: fp64}, "same": {name: 16-bit}}`` for the forward output
    ("out") or, with ``dout``, the gradients ("dq", plus "dk" and "dv": of every row when ``rows``
    is None, else of the whole sequences ``seqs``, whose packed positions are under "kv_index")."""
    import torch

    if rows is None:
        want = _whole(q, k, v, seqlens, dout, torch.float64)
        same = _whole(q, k, v, seqlens, dout, None)
    else:
        want = _rows(q, k, v, seqlens, rows, dout, torch.float64)
        same = _rows(q, k, v, seqlens, rows, dout, None)
    out = {"rows": rows, "want": want, "same": same}
    if rows is not None and dout is not None and seqs:
        want.update(_sequences(q, k, v, seqlens, seqs, dout, torch.float64))
        same.update(_sequences(q, k, v, seqlens, seqs, dout, None))
        out["kv_index"] = token_index(seqlens, seqs, q.device)
    elif rows is not None and dout is not None:  # no sequence is small enough: sampled key rows, exact
        exact = key_rows_exact(q, k, v, dout, seqlens, rows)
        want.update(dk=exact["dk"], dv=exact["dv"])
        out["kv_index"] = rows
        out["kv_scale"] = {"dk": exact["abs_dk"], "dv": exact["abs_dv"]}
    return out


def sample_sequences(seqlens, max_tokens: int, max_seqs: int = 8) -> list[int]:
    """A deterministic sample of whole sequences for the dK/dV check: sequences at evenly spaced
    positions of the batch, each taken while the sample stays within ``max_tokens`` tokens (an fp64
    reference of a sequence holds its heads x L x L scores), at most ``max_seqs``; empty when no
    sequence fits (then ``key_rows_exact`` checks sampled key rows instead)."""
    n = len(seqlens)
    if n == 0:
        return []
    picks = sorted({round(i * (n - 1) / max(1, max_seqs - 1)) for i in range(min(n, max_seqs))})
    chosen, used = [], 0
    for i in picks:
        if used + seqlens[i] <= max_tokens:
            chosen.append(i)
            used += seqlens[i]
    return chosen


def key_rows_exact(q, k, v, dout, seqlens, rows, chunk: int = 256) -> dict:
    """dK and dV at the packed key positions ``rows``, exact in fp64 over every query of their
    sequences, without any L x L matrix of a whole sequence: queries in chunks of ``chunk`` rows
    (each chunk's [heads, chunk, L] scores give its log-sum-exp and output, hence
    D_i = dO_i . O_i), and for the sampled keys j: dV_j = sum_i P_ij dO_i and
    dK_j = scale * sum_i P_ij (dP_ij - D_i) q_i, summed over each KV head's group of query heads.
    Also the elementwise sums of absolute terms (``abs_dk``, ``abs_dv``): the fp32 rule's scale."""
    import math

    import torch

    heads, kv_heads, d = q.shape[1], k.shape[1], q.shape[2]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(d)
    starts, acc = [], 0
    for n in seqlens:
        starts.append(acc)
        acc += n
    bounds = torch.tensor(starts[1:] + [acc])
    rows = rows.cpu()
    seq_of = [int(torch.searchsorted(bounds, int(r), right=True)) for r in rows]
    out = {name: torch.zeros(len(rows), kv_heads, d, dtype=torch.float64, device=q.device)
           for name in ("dk", "dv", "abs_dk", "abs_dv")}
    for b in sorted(set(seq_of)):
        s0, length = starts[b], seqlens[b]
        picked = [i for i, sb in enumerate(seq_of) if sb == b]
        local = torch.tensor([int(rows[i]) - s0 for i in picked], device=q.device)
        qs, ks, vs, dos = (t[s0:s0 + length].double() for t in (q, k, v, dout))
        kh, vh = ks.repeat_interleave(group, 1), vs.repeat_interleave(group, 1)  # [L, H, D]
        vj = vh[local]
        acc_t = {name: torch.zeros(len(picked), heads, d, dtype=torch.float64, device=q.device) for name in out}
        keys = torch.arange(length, device=q.device)
        for c0 in range(0, length, chunk):
            qc, doc = qs[c0:c0 + chunk], dos[c0:c0 + chunk]
            scores = torch.einsum("chd,lhd->hcl", qc, kh) * scale
            causal = keys[None, :] > (c0 + torch.arange(qc.shape[0], device=q.device))[:, None]
            scores = scores.masked_fill(causal[None], -math.inf)
            p = torch.exp(scores - torch.logsumexp(scores, -1, keepdim=True))
            o = torch.einsum("hcl,lhd->chd", p, vh)
            big_d = (doc * o).sum(-1).t()  # [H, c]
            pj = p[:, :, local]  # [H, c, m]
            ds = pj * (torch.einsum("chd,mhd->hcm", doc, vj) - big_d[..., None])
            acc_t["dk"] += torch.einsum("hcm,chd->mhd", ds, qc) * scale
            acc_t["dv"] += torch.einsum("hcm,chd->mhd", pj, doc)
            acc_t["abs_dk"] += torch.einsum("hcm,chd->mhd", ds.abs(), qc.abs()) * scale
            acc_t["abs_dv"] += torch.einsum("hcm,chd->mhd", pj, doc.abs())
        for name, t in acc_t.items():
            out[name][picked] = t.reshape(len(picked), kv_heads, group, d).sum(2)
    return out


def to_packed(t, seqlens, heads: int):
    """A provider's output or gradient in the packed layout ``[T, heads, D]``: flex's
    ``[1, H, T, D]`` and the padded ``[B, H, Lmax, D]`` are mapped back, and a gradient with respect
    to K/V repeated per query head (``[T, Hq, D]`` for ``heads`` KV heads) is summed over each
    group, in fp32."""
    import torch

    if t.dim() == 4 and t.shape[0] == 1 and t.shape[2] == sum(seqlens):  # flex (and padded with B = 1)
        t = t[0].transpose(0, 1)
    elif t.dim() == 4:  # padded [B, H, Lmax, D]
        lmax = t.shape[2]
        mask = torch.arange(lmax, device=t.device)[None, :] < torch.tensor(seqlens, device=t.device)[:, None]
        t = t.transpose(1, 2)[mask]
    if t.shape[1] != heads:
        group = t.shape[1] // heads
        t = t.float().reshape(t.shape[0], heads, group, t.shape[2]).sum(2)
    return t
