"""Output checks of the suites: every provider's output is compared once per shape with an fp64
reference, outside the timed region, with the kernel tests' bounds (``polytrace_kernels.tolerance``).

- Our kernels get the tests' rule for their output's dtype (``check_output``: the fp32 rule for
  fp32 outputs, 2x torch's same-dtype error for 16-bit ones; ``check_rounded`` for a 16-bit output
  rounded once from fp32, such as the log-prob kernels' logits gradient).
- Peers and baselines pass with the fp32 rule or, failing it, within 2x torch's own error in the
  inputs' 16-bit dtype (``check_vs_torch``): a peer that computes through 16-bit intermediates by
  design (a bf16 LM head, bf16 attention) is not wrong, one that is worse than torch is.

At GPU sizes an fp64 reference of a whole output is too big ([16k, 152k] logits are 20 GB in fp64),
so the truth is computed on a deterministic subset of rows (``subset_rows``: ``CHECK_ROWS`` evenly
spaced rows, first and last included), and ``extra_info["check"]["subset"]`` says which. On CPU
shapes every row is checked.
"""

from __future__ import annotations

CHECK_ROWS = 64


def subset_rows(n: int, k: int = CHECK_ROWS, device=None):
    """``k`` evenly spaced row indices of ``n`` (all of them when ``n <= k``), as a long tensor."""
    import torch

    if n <= k:
        return torch.arange(n, device=device)
    return torch.linspace(0, n - 1, k, dtype=torch.float64).round().long().unique().to(device)


def subset_note(n: int, k: int = CHECK_ROWS, what: str = "rows") -> str:
    return f"all {n} {what} in fp64" if n <= k else f"{min(k, n)} of {n} {what} (evenly spaced) in fp64"


def verify(name: str, out, truth, *, ours: bool, torch_same=None, terms: int = 1, scale=0.0,
           rounded: bool = False):
    """One output against its fp64 truth: a ``tolerance.Check``. ``rounded``: a 16-bit output that
    is one rounding of an fp32 result (a gradient, a GEMM's output), held to half an ulp plus the
    fp32 rule."""
    import torch

    from polytrace_kernels import tolerance

    sixteen = out.dtype in (torch.float16, torch.bfloat16)
    if rounded and sixteen:
        primary = tolerance.check_rounded(name, out, truth, terms=terms, scale=scale)
    elif ours or sixteen or torch_same is None:
        primary = tolerance.check_output(name, out, truth, torch_same=torch_same, terms=terms, scale=scale)
    else:
        primary = tolerance.check_fp32(name, out, truth, terms=terms, scale=scale)
    if ours or primary.ok or torch_same is None:
        return primary
    return tolerance.check_vs_torch(name, out, torch_same, truth)


def exact(name: str, out, want):
    """Bit-exact outputs (pack, unpack: copies): the bound is 0."""
    from polytrace_kernels import tolerance

    err = 0.0 if out.shape == want.shape and bool((out == want).all()) else float("inf")
    if out.shape == want.shape and err:
        err = float((out.double() - want.double()).abs().max())
    detail = "" if out.shape == want.shape else f"shape {tuple(out.shape)} vs {tuple(want.shape)}"
    return tolerance.Check(name, err, 0.0, err == 0.0, "exact copy", detail)


def summary(results: list, subset: str = "") -> dict:
    """``extra_info["check"]``: ``ok``, and ``max_abs_err`` / ``bound`` / ``rule`` of the output
    nearest its bound, every output's own entry under ``outputs``, and what was compared."""
    if not results:
        return {"ok": None, "rule": "not checked", "outputs": []}

    def closeness(c) -> float:
        if not c.ok:
            return float("inf")
        return c.max_abs_err / c.bound if c.bound > 0 else (0.0 if c.max_abs_err == 0 else float("inf"))

    worst = max(results, key=closeness)
    out = worst.as_dict()
    out.pop("name", None)
    out["ok"] = all(c.ok for c in results)
    out["output"] = worst.name
    out["outputs"] = [c.as_dict() for c in results]
    if subset:
        out["subset"] = subset
    return out
