"""fp64 references of the log-prob suite's GPU-sized checks, in vocabulary chunks (no [T, V] fp64
matrix is held), and the FLOP conventions of the fused LM-head log-prob beside the peers'."""

from __future__ import annotations

V_CHUNK = 16384  # vocabulary rows per fp64 matmul chunk of the fused reference

# FLOP conventions beside ours: what each peer's published TFLOP/s count for the fused LM-head
# log-prob fwd+bwd. Ours counts the matmuls any implementation needs, 6THV (logits, d(hidden),
# d(weight)); our kernel executes 8THV (it recomputes the logits in the backward). Liger's fused
# linear cross entropy is reported to count 8MHV (M tokens, H hidden, V vocabulary) for fwd+bwd
# (a review of its benchmarks; not re-derived from Liger's source here): its figures read 4/3 of ours.
FLOP_CONVENTIONS = {"polytrace": "6THV (matmuls needed: logits, d(hidden), d(weight))",
                    "polytrace_executed": "8THV (our kernel recomputes the logits in the backward)",
                    "liger": "8MHV (M tokens; fwd+bwd as liger's fused linear cross entropy quotes it)"}


def fp64_logits(h_rows, w):
    """fp64 logits of some rows and, per row, the largest sum_k |h_k w_k| (the fp32 rule's scale),
    in vocabulary chunks so the weight is never held in fp64 whole."""
    import torch

    h64 = h_rows.double()
    logits, absdot = [], []
    for start in range(0, w.shape[0], V_CHUNK):
        w64 = w[start:start + V_CHUNK].detach().double()
        logits.append(h64 @ w64.t())
        absdot.append(h64.abs() @ w64.abs().t())
    return torch.cat(logits, 1), torch.cat(absdot, 1).amax(-1)


def dweight_rows(h, w, tokens, vrows, entropy: bool, dtype):
    """Rows ``vrows`` of d(weight) of ``sum(log-prob) [+ sum(entropy)]`` over *every* token: exact
    in fp64 (``dtype`` float64), or torch's own 16-bit path (``dtype`` None: 16-bit logits, fp32
    softmax statistics, the gradient rounded to the inputs' dtype, a 16-bit matmul), in vocabulary
    chunks of ``V_CHUNK`` so no [T, V] fp64 matrix is held.

    Per token t, with p = softmax(z) over the whole vocabulary and H its entropy,
    d log p_tok / dz_v = [v == tok] - p_v and dH / dz_v = -p_v (log p_v + H); d(weight)[v] is
    the sum over tokens of that times hidden[t]."""
    import torch

    exact = dtype == torch.float64
    acc = torch.float64 if exact else torch.float32
    hh, ww = (h.detach().double(), w.detach().double()) if exact else (h.detach(), w.detach())
    n = hh.shape[0]
    m = torch.full((n,), -float("inf"), dtype=acc, device=h.device)
    total = torch.zeros(n, dtype=acc, device=h.device)
    weighted = torch.zeros(n, dtype=acc, device=h.device)
    for start in range(0, ww.shape[0], V_CHUNK):
        z = (hh @ ww[start:start + V_CHUNK].t()).to(acc)
        new_m = torch.maximum(m, z.amax(1))
        e = torch.exp(z - new_m[:, None])
        rescale = torch.exp(m - new_m)
        total = total * rescale + e.sum(1)
        weighted = weighted * rescale + (e * z).sum(1)
        m = new_m
    lse = m + torch.log(total)
    ent = lse - weighted / total
    z = (hh @ ww[vrows].t()).to(acc)
    logp = z - lse[:, None]
    p = torch.exp(logp)
    g = (tokens[:, None] == vrows[None, :]).to(acc) - p
    if entropy:
        g = g - p * (logp + ent[:, None])
    if exact:
        return g.t() @ hh
    return g.to(h.dtype).t() @ hh
