"""The kernel tests' accuracy checks: every output against its fp64 truth with the rule of
``polytrace_kernels.tolerance`` for its dtype, and the ``scale`` each output's fp32 bound needs.

``scale`` is the magnitude of the intermediates an output passes through (see the tolerance
module); here is how each kernel's is computed, from the fp64 truth and the rounded inputs:

- log-prob and entropy: the row maximum ``max_v |x_v / T|`` (``(x_t - m) - log s`` subtracts
  numbers that large), ``terms = V``; fused LM head: ``max_v sum_k |h_k w_vk| / T`` (a logit's dot
  product), ``terms = V``.
- logits gradient ``dx_i = (g [i = t] - g p_i - g_H p_i (log p_i + H)) / T``: p_i carries the
  log-prob's error relatively, so ``scale_i = (|g| + |g_H| (|log p_i| + |H| + 1)) p_i
  (row scale + log2 V) / T`` elementwise; the fused gradients push that (plus each d(logit)'s own
  rounding) through their matmuls: ``(E + log2(V) |dz|) @ |W|`` for d(hidden), ``(E + log2(T)
  |dz|)^T @ |H|`` for d(weight).
- attention log-sum-exp: ``softmax_scale * max_j sum_d |q_d k_jd|`` over the keys a row sees,
  ``terms`` = the most keys a row sees.

16-bit outputs get ``check_vs_torch`` (2x torch's same-dtype error) and ``check_bias`` (no scale
error hidden under the 16-bit rounding; for the fused gradients against the truth of the d(logits)
rounded to the input dtype, see ``linear_checks``); the logits gradient, one rounding of an fp32
result, also gets ``check_rounded``.
"""

from __future__ import annotations

import math

import torch

from polytrace_kernels.tolerance import Check, check_bias, check_fp32, check_rounded, check_vs_torch, ulp

SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def expect(*checks) -> None:
    """Fail with every failed check's one-line message."""
    failed = [c for c in checks if not c.ok]
    assert not failed, " | ".join(c.message() for c in failed)


def check_summed_once(name, out, exact_sum, max_share=0.01) -> Check:
    """A 16-bit matmul result summed in fp32 and rounded once: against the fp64 sum of the same
    16-bit operands, at most ``max_share`` of its elements more than one ulp off (a correctly
    rounded sum is within half an ulp; the rest is room for the fp32 sum and for the few d(logits)
    an fp32 computation rounds to the neighbour of the exact value's rounding: 0 to 0.2% of
    elements measured, the worst 4 ulps). A sum carried in 16 bits across vocabulary chunks rounds
    every chunk's partial sum: 11-18 ulps at the 99th percentile over 8-16 chunks."""
    out64, exact = out.detach().double(), exact_sum.detach().double()
    over = (out64 - exact).abs() > ulp(torch.maximum(out64.abs(), exact.abs()), out.dtype)
    share = float(over.float().mean()) if over.numel() else 0.0
    ok = share <= max_share
    return Check(name, share, max_share, ok, "share of elements > 1 ulp from the once-rounded fp32 sum",
                 "" if ok else f"{int(over.sum())} of {over.numel()} elements over one ulp")


def sixteen_bit_checks(name, out, torch_same, truth) -> list:
    return [check_vs_torch(name, out, torch_same, truth), check_bias(name, out, truth)]


# ------------------------------------------------------------------------------------ log-prob


def _grad_weight(logp, entropy, g_lp, g_ent):
    """(|g| + |g_H| (|log p| + |H| + 1)) p, with 0 where p = 0 (masked logits)."""
    p = logp.exp()
    mag = g_lp.abs()[:, None] + g_ent.abs()[:, None] * (logp.abs() + entropy.abs()[:, None] + 1.0)
    return torch.where(p > 0, mag * p, torch.zeros_like(p))


def logits_checks(name, x, tokens, temperature, ours, torch_same, truth, upstream, ignore_index=-100) -> list:
    """Checks for (logprob, entropy, d logits) of ``token_logprobs`` on logits ``x``; ``truth`` from
    the fp64 reference on ``x.double()``, ``upstream`` = (d logprob, d entropy)."""
    vocab = x.shape[1]
    x64 = x.detach().double() / temperature
    finite = torch.isfinite(x64)
    row_scale = torch.where(finite, x64.abs(), torch.zeros_like(x64)).amax(1)
    checks = [check_fp32(f"{name}/logprob", ours[0], truth[0], terms=vocab, scale=row_scale),
              check_fp32(f"{name}/entropy", ours[1], truth[1], terms=vocab, scale=row_scale)]
    if len(ours) <= 2:
        return checks
    ignored = tokens == ignore_index
    g_lp, g_ent = (g.double().masked_fill(ignored, 0.0) for g in upstream)
    weight = _grad_weight(torch.log_softmax(x64, -1), truth[1].double(), g_lp, g_ent)
    grad_scale = weight * (row_scale[:, None] + math.log2(vocab)) / temperature
    if ours[2].dtype in SIXTEEN_BIT:
        checks.append(check_rounded(f"{name}/grad", ours[2], truth[2], scale=grad_scale))
        checks += sixteen_bit_checks(f"{name}/grad", ours[2], torch_same[2], truth[2])
    else:
        checks.append(check_fp32(f"{name}/grad", ours[2], truth[2], scale=grad_scale))
    return checks


def linear_checks(name, h, w, tokens, temperature, ours, torch_same, truth, upstream, ignore_index=-100,
                  softcap=None) -> list:
    """Checks for (logprob, entropy, d hidden, d weight) of ``linear_token_logprobs``. With
    ``softcap`` (logits z -> c tanh(z / c)): a capped logit carries the dot product's error times
    1 - tanh^2 <= 1 plus the tanh's own few ulps of c, so the row scale grows by c / T; d(logits)
    is multiplied by 1 - tanh^2, whose relative error is 2 |tanh| |dy| + 8 ulps (the tanh check of
    ``test_logprob_features.py``) with |dy| <= (sum_k |h_k w_vk| / c + |y|) ulps for y = z / c."""
    vocab, n_rows = w.shape[0], h.shape[0]
    h64, w64 = h.detach().double(), w.detach().double()
    reach = (h64.abs() @ w64.abs().t()) / temperature  # sum_k |h_k w_vk| / T per logit
    row_scale = reach.amax(1) if n_rows else torch.zeros(0, dtype=torch.float64)
    z64 = h64 @ w64.t()
    dcap = torch.ones_like(z64)
    if softcap is not None:
        y = z64 / softcap
        tanh = torch.tanh(y)
        dcap_cond = 2.0 * (reach * temperature / softcap + y.abs()) + 8.0
        z64, dcap = softcap * tanh, 1.0 - tanh * tanh
        row_scale = row_scale + softcap / temperature
    checks = [check_fp32(f"{name}/logprob", ours[0], truth[0], terms=vocab, scale=row_scale),
              check_fp32(f"{name}/entropy", ours[1], truth[1], terms=vocab, scale=row_scale)]
    if len(ours) <= 2:
        return checks
    ignored = tokens == ignore_index
    g_lp, g_ent = (g.double().masked_fill(ignored, 0.0) for g in upstream)
    logp = torch.log_softmax(z64 / temperature, -1)
    entropy = truth[1].double()
    p = logp.exp()
    onehot = torch.zeros_like(p)
    keep = ~ignored
    onehot[keep.nonzero()[:, 0], tokens[keep].long()] = 1.0
    dz = (g_lp[:, None] * (onehot - p) - g_ent[:, None] * p * (logp + entropy[:, None])) / temperature * dcap
    err_dz = _grad_weight(logp, entropy, g_lp, g_ent) * (row_scale[:, None] + math.log2(vocab)) / temperature * dcap
    err_dz = err_dz + dz.abs() * (dcap_cond if softcap is not None else 1.0)
    # The 16-bit backward materialises d(logits) in the input dtype (by design: half the memory).
    # That rounding flushes probabilities below the 16-bit range, which shifts the gradients by a
    # few 1e-4 relative (2.5e-4 measured at V=3996, fp16; torch's fp16 path 4-7e-4) although every
    # value is rounded correctly; the bias check therefore compares with the fp64 matmul of the
    # exact d(logits) rounded to that dtype, which a real scale error still misses by ~0.
    dz_r = dz.to(h.dtype).double()
    for i, part, scale, rounded_truth in (
            (2, "grad_hidden", (err_dz + math.log2(vocab) * dz.abs()) @ w64.abs(), dz_r @ w64),
            (3, "grad_weight", (err_dz + math.log2(max(n_rows, 1)) * dz.abs()).t() @ h64.abs(), dz_r.t() @ h64)):
        if ours[i].dtype in SIXTEEN_BIT:
            checks += [check_vs_torch(f"{name}/{part}", ours[i], torch_same[i], truth[i]),
                       check_bias(f"{name}/{part}", ours[i], rounded_truth)]
            # torch's CPU matmul sums in fp32 and rounds once, as our chunk accumulator does; cuBLAS
            # may split K with 16-bit reductions (allow_bf16_reduced_precision_reduction), so a
            # GPU's one-chunk d(hidden) and every d(weight) are left to the checks above
            if ours[i].device.type == "cpu":
                checks.append(check_summed_once(f"{name}/{part}", ours[i], rounded_truth))
        else:
            checks.append(check_fp32(f"{name}/{part}", ours[i], truth[i], scale=scale))
    return checks


# ----------------------------------------------------------------------------------- attention


def _attention_allowed(lq, lk, causal, window_size):
    """[Lq, Lk] keys each row sees (bottom-right causal, flash-attn's window), or None for all."""
    left, right = window_size
    right = 0 if causal else right
    if left < 0 and right < 0:
        return None
    rel = torch.arange(lk)[None, :] - torch.arange(lq)[:, None] - (lk - lq)
    return ((rel <= right) | (right < 0)) & ((rel >= -left) | (left < 0))


def attention_lse_scale(q, k, cu_q, cu_k, causal: bool, softmax_scale: float, softcap=0.0, window_size=(-1, -1)):
    """([Hq, Tq] fp64 ``softmax_scale * max_j sum_d |q_d k_jd|`` over the keys each row sees, the
    most keys any row sees). A softcap c adds 2c: c tanh(s / c) passes the score's rounding with
    slope <= 1 and adds tanh's own (~2 roundings of 1, times c)."""
    hq, hkv = q.shape[1], k.shape[1]
    out = torch.zeros(hq, q.shape[0], dtype=torch.float64)
    most = 1
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if qe == qs or ke == ks:
            continue
        qa = q[qs:qe].detach().double().abs().transpose(0, 1)
        ka = k[ks:ke].detach().double().abs().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        reach = qa @ ka.transpose(1, 2) * abs(softmax_scale) + 2.0 * softcap
        lq, lk = qe - qs, ke - ks
        allowed = _attention_allowed(lq, lk, causal, window_size)
        if allowed is not None:
            reach = reach.masked_fill(~allowed, 0.0)
        out[:, qs:qe] = reach.amax(-1)
        most = max(most, lk)
    return out, most


def decode_lse_scale(q, k_cache, cache_seqlens, softmax_scale: float, block_table=None, softcap=0.0,
                     window_size=(-1, -1)):
    """[B, Hq] fp64 scale of the decode log-sum-exp, and the longest cache. A softcap c adds 2c (as
    ``attention_lse_scale``); a window's left side keeps the last ``left + 1`` keys."""
    lens = [int(n) for n in cache_seqlens.tolist()]
    b_, hq = q.shape[0], q.shape[1]
    out = torch.zeros(b_, hq, dtype=torch.float64)
    for b, n in enumerate(lens):
        if n <= 0:
            continue
        if block_table is None:
            kb = k_cache[b, :n]
        else:
            page = k_cache.shape[1]
            pages = block_table[b, : (n + page - 1) // page].long()
            kb = k_cache[pages].reshape(-1, *k_cache.shape[2:])[:n]
        if window_size[0] >= 0:
            kb = kb[max(0, n - 1 - window_size[0]):]
        ka = kb.detach().double().abs().transpose(0, 1).repeat_interleave(hq // kb.shape[1], 0)  # [Hq, n, D]
        out[b] = (ka @ q[b].detach().double().abs()[:, :, None])[..., 0].amax(-1) * abs(softmax_scale) + 2.0 * softcap
    return out, max([1, *lens])


def attention_fp32_scales(q, k, v, dout, cu_q, cu_k, causal: bool, softmax_scale: float, softcap=0.0,
                          window_size=(-1, -1)):
    """Elementwise fp32 ``scale`` of out, dq, dk, dv for attention run in fp32 (the interpreter's
    precision probe), from an error model of the kernels' arithmetic in fp64:

    - a score's rounding ``u * R_ij`` (``R = softmax_scale |q| |k|^T``) moves p_ij relatively, and
      the row's sums add ``log2(Lk)``: ``A_i = max_j R_ij + log2(Lk) + 1``;
    - out: ``A_i * sum_j p_ij |v_j|``; dv: ``sum_i A_i p_ij |do_i|`` (+ ``log2(Lq)`` for the sum);
    - ds = p (dp - delta): ``E_ij = p_ij (|dp_ij - delta_i| A_i + sum_d |do_id v_jd| + sum_d
      |do_id o_id|)``; dq and dk push ``E + log2(L) |ds|`` through ``|k|`` and ``|q|``;
    - a softcap c: scores c tanh(s / c) (R + 2c, as ``attention_lse_scale``), ds times the slope
      1 - tanh^2, whose own error adds ``|p (dp - delta)| 2 (R / c + 2)``.
    """
    tq, hq, d = q.shape
    tk, hkv, _ = k.shape
    group = hq // hkv
    scales = {name: torch.zeros(shape, dtype=torch.float64) for name, shape in
              (("out", (tq, hq, d)), ("dq", (tq, hq, d)), ("dk", (tk, hkv, d)), ("dv", (tk, hkv, d)))}
    cq, ck = cu_q.tolist(), cu_k.tolist()
    sc = abs(softmax_scale)
    for b in range(len(cq) - 1):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        lq, lk = qe - qs, ke - ks
        if lq == 0 or lk == 0:
            continue
        qb = q[qs:qe].detach().double().transpose(0, 1)  # [Hq, Lq, D]
        kb = k[ks:ke].detach().double().transpose(0, 1).repeat_interleave(group, 0)
        vb = v[ks:ke].detach().double().transpose(0, 1).repeat_interleave(group, 0)
        dob = dout[qs:qe].detach().double().transpose(0, 1)
        s = qb @ kb.transpose(1, 2) * softmax_scale
        reach = qb.abs() @ kb.abs().transpose(1, 2) * sc + 2.0 * softcap
        slope = 1.0 - torch.tanh(s / softcap) ** 2 if softcap else 1.0
        s = torch.tanh(s / softcap) * softcap if softcap else s
        allowed = _attention_allowed(lq, lk, causal, window_size)
        if allowed is not None:
            s = s.masked_fill(~allowed, float("-inf"))
            reach = reach.masked_fill(~allowed, 0.0)
        p = torch.softmax(s, -1).nan_to_num(0.0)  # rows that see no key: 0
        a = reach.amax(-1, keepdim=True) + math.log2(lk) + 1.0  # [Hq, Lq, 1]
        o = p @ vb
        dp = dob @ vb.transpose(1, 2)
        delta = (dob * o).sum(-1, keepdim=True)
        ds = p * (dp - delta) * slope
        err_ds = p * ((dp - delta).abs() * a + dob.abs() @ vb.abs().transpose(1, 2)
                      + (dob.abs() * o.abs()).sum(-1, keepdim=True))
        if softcap:  # the slope's own error: 2 |tanh| d(tanh), d(tanh) <= (R / c + 2) roundings
            err_ds = err_ds + (p * (dp - delta)).abs() * 2.0 * (reach / softcap + 2.0)
        log_q = math.log2(lq)
        scales["out"][qs:qe] = (a * (p @ vb.abs())).transpose(0, 1)
        scales["dq"][qs:qe] = (sc * ((err_ds + math.log2(lk) * ds.abs()) @ kb.abs())).transpose(0, 1)
        dk = sc * ((err_ds + log_q * ds.abs()).transpose(1, 2) @ qb.abs())  # [Hq, Lk, D]
        dv = (p * (a + log_q)).transpose(1, 2) @ dob.abs()
        scales["dk"][ks:ke] = dk.reshape(hkv, group, lk, d).sum(1).transpose(0, 1)
        scales["dv"][ks:ke] = dv.reshape(hkv, group, lk, d).sum(1).transpose(0, 1)
    return scales
