"""How close a kernel's output must be to the truth: one rule for every kernel test and benchmark check.

``truth`` is always an **fp64 reference computed from the same, already rounded, inputs** the kernel
saw (a bf16 input upcast exactly to fp64, never the fp32 original it was rounded from). The bound
then follows the dtype of the kernel's output:

fp32 (and fp64) outputs: log-probs, entropies, log-sum-exps, fp32 gradients
    ``|out - truth| <= c * 2**-24 * (|truth| + scale + log2(terms)) + 2**-126`` elementwise
    (``fp32_bound``; the last term is fp32's underflow: a truth of 1e-217 comes out 0 or subnormal).

    ``2**-24`` is fp32's unit roundoff ``u``. Why these three terms, for a kernel whose arithmetic is
    fp32 throughout (inputs of any width are exact in fp32):

    - ``|truth|``: the final roundings of the result itself (a few ``u`` relative).
    - ``scale``: the magnitude of the largest intermediate the result passes through, whose own
      rounding (``u * scale`` absolute) survives into the result even after cancellation: the row
      maximum ``max |logit / T|`` of a log-softmax (``(x_t - m) - log s`` subtracts numbers that
      large), ``softmax_scale * max_j sum_d |q_d k_jd|`` for an attention score, ``sum_k |h_k w_k|``
      for a fused matmul's logit. A float or a tensor broadcastable to ``truth`` (per row, say).
    - ``log2(terms)``: a sum of ``terms`` terms (the softmax denominator over V vocabulary entries or
      Lk keys) summed in blocks has a relative error growing with ``log2`` of the count on average,
      and its log turns that into an absolute error.

    ``c = 8`` (``DEFAULT_C``), from measurements in the Triton interpreter against fp64 (commit after
    ``b54751f``; ``tests/kernels/test_tolerance.py`` pins the rule): the largest ``error / (u * (|truth| +
    scale + log2(terms)))`` over every element was 0.86 for ``token_logprobs`` log-probs and
    entropies (T=37 V=1031 and the all-negative, 1e4-magnitude and 1e4-offset rows, fp32/fp16/bf16
    inputs), 1.36 for the fused LM-head forward (H 40-256, logits up to |600|), 2.0 for the varlen
    attention LSE and 1.3 for the decode LSE (fp16, scores up to |150|), 1.9 for the fp32 logits
    gradient and 0.97 for the fused fp32 gradients (with the elementwise scales of
    ``tests/_bounds.py``: the log-prob's error carried by p_i, pushed through the matmuls). So
    ``c = 8`` sits 4x above the worst element measured and 10-20x above a typical one, leaving room
    for the GPU's approximate ``ex2``/``lg2`` (about 2 ulp each), while a log-prob test at T=37, V=1031 (``u *
    (10 + 12 + 10)``, bound 1.5e-5) still fails a 2e-4 bias by 13x and a 1.0003 scale error by 100x.
    The old rule for these outputs ("2x torch's bf16 error") allowed 0.25 to 127.

16-bit outputs (bf16/fp16 attention outputs and gradients, 16-bit logits and LM-head gradients)
    ``max |out - truth| <= factor * max |torch_same - truth|`` (``check_vs_torch``, factor 2:
    flash-attention's rule), where ``torch_same`` is torch's own computation in the output's dtype
    on the same inputs; with a floor of the output dtype's unit roundoff times ``max |truth|`` (the
    error of rounding the largest value correctly, which any 16-bit result may carry; it matters only
    when torch's result is exact by luck). Never compare an fp32 output with this rule: torch's
    16-bit result is rounded at 2**-8 relative, so the bound would be ~10^4 times the fp32 error.

Two tighter checks for 16-bit outputs, where "2x torch" is blind to scale errors below the 16-bit
rounding (fp16 rounds at 4.9e-4 relative, bf16 at 3.9e-3; a 3e-4 scale error passes it):

- ``check_rounded``: a 16-bit output that is one rounding of an fp32 result (the logits gradient)
  must be within half an ulp of its dtype plus the fp32 bound.
- ``check_bias``: the least-squares relative scale of ``out`` against ``truth`` must stay within 6
  standard errors of its own residuals (or a floor of the dtype's unit roundoff / 16). Measured on
  the attention outputs and gradients (fp16, T 38-95): a correct kernel sits at 0.1-3.2 standard
  errors, a 2e-4 or 3e-4 scale error at 8-80.

Non-finite values: where ``truth`` is NaN the output must be NaN, where it is +-inf the output must be
the same infinity; a non-finite output anywhere else fails (``max_abs_err = inf``). Errors are
measured over the positions where the truth is finite.

``check_output`` picks the rule from ``out.dtype`` (fp32 rule, or 2x torch); ``Check.message()`` is
the one-line failure text for assertions and benchmark reports, ``Check.as_dict()`` its JSON-safe form.

torch only (no ``polytrace`` import), so a vendored kernel family can keep its tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

FP32_UNIT_ROUNDOFF = 2.0**-24
#: fp32's smallest normal number: below it results lose relative precision (subnormals, then 0), so
#: the fp32 bound never goes under it (a gradient entry p_i * g with p_i = e^-500 is 0 in fp32).
FP32_TINY = 2.0**-126
#: Multiple of fp32 rounding at the truth's scale allowed for fp32 outputs (see the module docstring).
DEFAULT_C = 8.0
#: Multiple of torch's own same-dtype error allowed for 16-bit outputs.
DEFAULT_FACTOR = 2.0

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)
_FP32_RULE_DTYPES = (torch.float32, torch.float64)


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the gap between 1 and the next representable number: 2^-24 (fp32), 2^-11 (fp16), 2^-8 (bf16)."""
    if not dtype.is_floating_point:
        raise ValueError(f"unit_roundoff needs a floating dtype, got {dtype}")
    return torch.finfo(dtype).eps / 2.0


@dataclass(frozen=True)
class Check:
    """The verdict of one output against its truth.

    ``max_abs_err``: max ``|out - truth|`` over the positions where the truth is finite (``inf`` when
    the non-finite pattern differs). ``bound``: the bound at the element where ``err / bound`` is
    largest (a scalar rule's bound for ``check_vs_torch``). ``detail``: where it failed, or "".
    """

    name: str
    max_abs_err: float
    bound: float
    ok: bool
    rule: str
    detail: str = ""

    def as_dict(self) -> dict:
        """``{"name", "max_abs_err", "bound", "ok", "rule"}``; a non-finite number becomes None
        (strict JSON has no inf/NaN)."""
        def num(x: float):
            return float(x) if math.isfinite(x) else None

        return {"name": self.name, "max_abs_err": num(self.max_abs_err), "bound": num(self.bound),
                "ok": bool(self.ok), "rule": self.rule}

    def message(self) -> str:
        verdict = "<=" if self.ok else ">"
        text = f"{self.name}: max |err| {self.max_abs_err:.3g} {verdict} bound {self.bound:.3g} [{self.rule}]"
        return f"{text}; {self.detail}" if self.detail else text


# ---------------------------------------------------------------------------------------------


def _as_f64(x: torch.Tensor, what: str, like: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.shape != like.shape:
        raise ValueError(f"{what} has shape {tuple(x.shape)} but truth has shape {tuple(like.shape)}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"{what} must be a floating tensor, got {x.dtype}")
    return x.detach().to(device=like.device, dtype=torch.float64)


def _check_truth(truth) -> torch.Tensor:
    if not isinstance(truth, torch.Tensor):
        raise ValueError(f"truth must be a torch.Tensor, got {type(truth).__name__}")
    if truth.dtype != torch.float64:
        raise ValueError(f"truth must be float64 (an fp64 reference computed from the same rounded inputs), "
                         f"got {truth.dtype}")
    return truth.detach()


def _check_terms(terms) -> int:
    if isinstance(terms, bool) or not isinstance(terms, int) or terms < 1:
        raise ValueError(f"terms must be a positive int, got {terms!r}")
    return terms


def _check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _index(flat_pos: int, shape) -> tuple:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_pos), tuple(shape))) if shape else ()


def _nonfinite_mismatch(out64: torch.Tensor, truth: torch.Tensor):
    """(count, first index) of positions where out's non-finite pattern differs from truth's."""
    t_nan, o_nan = torch.isnan(truth), torch.isnan(out64)
    t_inf, o_inf = torch.isinf(truth), torch.isinf(out64)
    same_inf = o_inf & t_inf & (torch.sign(out64) == torch.sign(truth))
    bad = (t_nan != o_nan) | (t_inf & ~same_inf) | (o_inf & ~t_inf)
    n_bad = int(bad.sum())
    if not n_bad:
        return 0, None
    first = int(torch.nonzero(bad.reshape(-1))[0])
    return n_bad, _index(first, truth.shape)


def _mismatch_check(name, rule, out64, truth, n_bad, where, bound) -> Check:
    pos = truth[where].item() if where is not None else float("nan")
    got = out64[where].item() if where is not None else float("nan")
    return Check(name, math.inf, bound, False, rule,
                 f"non-finite pattern differs from the truth at {n_bad} position(s), first at {where}: "
                 f"out {got!r} vs truth {pos!r}")


# ---------------------------------------------------------------------------------------------


def fp32_bound(truth: torch.Tensor, *, terms: int = 1, scale=0.0, c: float = DEFAULT_C) -> torch.Tensor:
    """Elementwise bound for an fp32 output: ``c * 2**-24 * (|truth| + scale + log2(terms)) + 2**-126``.

    ``scale`` is a float or a tensor broadcastable to ``truth`` (see the module docstring for what
    to pass). Non-finite truth positions get a bound of 0 (they are checked by pattern instead).
    """
    truth = _check_truth(truth)
    terms = _check_terms(terms)
    _check_positive("c", c)
    if isinstance(scale, torch.Tensor):
        scale = scale.detach().to(device=truth.device, dtype=torch.float64).abs()
        try:
            torch.broadcast_shapes(scale.shape, truth.shape)
        except RuntimeError:
            raise ValueError(f"scale has shape {tuple(scale.shape)}, not broadcastable to truth's "
                             f"{tuple(truth.shape)}") from None
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be a non-negative finite number or a tensor, got {scale!r}")
    finite = torch.isfinite(truth)
    magnitude = torch.where(finite, truth, torch.zeros_like(truth)).abs() + scale + math.log2(terms)
    bound = float(c) * FP32_UNIT_ROUNDOFF * magnitude + FP32_TINY
    bound = torch.where(finite, bound, torch.zeros_like(bound))
    if isinstance(scale, torch.Tensor) and not bool(torch.isfinite(bound).all()):
        raise ValueError("scale has non-finite values where the truth is finite")
    return bound.expand(truth.shape) if bound.shape != truth.shape else bound


def check_fp32(name: str, out: torch.Tensor, truth: torch.Tensor, *, terms: int = 1, scale=0.0,
               c: float = DEFAULT_C) -> Check:
    """``out`` (an fp32 or fp64 result) against ``truth`` with the fp32 rule (``fp32_bound``)."""
    truth = _check_truth(truth)
    out64 = _as_f64(out, "out", truth)
    bound = fp32_bound(truth, terms=terms, scale=scale, c=c)
    rule = f"fp32: {float(c):g}*2^-24*(|truth|+scale+log2({terms}))+2^-126"
    if truth.numel() == 0:
        return Check(name, 0.0, 0.0, True, rule)
    n_bad, where = _nonfinite_mismatch(out64, truth)
    finite = torch.isfinite(truth)
    if n_bad:
        return _mismatch_check(name, rule, out64, truth, n_bad, where, float(bound[where]))
    err = torch.where(finite, out64 - truth, torch.zeros_like(truth)).abs()
    if not bool(finite.any()):
        return Check(name, 0.0, 0.0, True, rule)
    ratio = torch.where(finite, err / bound, torch.full_like(err, -1.0))
    worst = int(torch.argmax(ratio.reshape(-1)))
    worst_idx = _index(worst, truth.shape)
    max_err = float(err.max())
    ok = bool((err <= bound).all())
    detail = "" if ok else (f"worst at {worst_idx}: out {out64[worst_idx].item():.9g} vs truth "
                            f"{truth[worst_idx].item():.9g} ({float(ratio.reshape(-1)[worst]):.3g}x its bound)")
    return Check(name, max_err, float(bound[worst_idx]), ok, rule, detail)


def check_vs_torch(name: str, out: torch.Tensor, torch_same: torch.Tensor, truth: torch.Tensor, *,
                   factor: float = DEFAULT_FACTOR) -> Check:
    """``out`` (a 16-bit result) within ``factor`` x torch's own same-dtype error ``torch_same``.

    Errors are over positions where the truth is finite; torch's over those where its own result is
    finite too (a torch overflow does not make the bound infinite). Floor: the unit roundoff of
    ``out.dtype`` times ``max |truth|``.
    """
    truth = _check_truth(truth)
    out64 = _as_f64(out, "out", truth)
    same64 = _as_f64(torch_same, "torch_same", truth)
    _check_positive("factor", factor)
    rule = f"{float(factor):g}x torch {str(torch_same.dtype).replace('torch.', '')}"
    if truth.numel() == 0:
        return Check(name, 0.0, 0.0, True, rule)
    finite = torch.isfinite(truth)
    torch_err = torch.where(finite & torch.isfinite(same64), same64 - truth, torch.zeros_like(truth)).abs()
    ref_err = float(torch_err.max())
    largest = float(torch.where(finite, truth, torch.zeros_like(truth)).abs().max())
    floor = unit_roundoff(out.dtype if out.dtype.is_floating_point else torch.float32) * largest
    bound = max(float(factor) * ref_err, floor)
    n_bad, where = _nonfinite_mismatch(out64, truth)
    if n_bad:
        return _mismatch_check(name, rule, out64, truth, n_bad, where, bound)
    err = torch.where(finite, out64 - truth, torch.zeros_like(truth)).abs()
    max_err = float(err.max())
    ok = max_err <= bound
    detail = ""
    if not ok:
        worst_idx = _index(int(torch.argmax(err.reshape(-1))), truth.shape)
        detail = (f"worst at {worst_idx}: out {out64[worst_idx].item():.6g} vs truth {truth[worst_idx].item():.6g}; "
                  f"torch's own error {ref_err:.3g}")
    return Check(name, max_err, bound, ok, rule, detail)


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype``'s numbers at ``|x|`` (fp64): ``eps * 2**(e-1)`` for ``|x|`` in
    ``[2**(e-1), 2**e)``, the subnormal spacing below the smallest normal."""
    info = torch.finfo(dtype)
    a = x.detach().to(torch.float64).abs()
    _, e = torch.frexp(torch.where(a >= info.tiny, a, torch.full_like(a, info.tiny)))
    return info.eps * torch.ldexp(torch.full_like(a, 0.5), e)


def check_rounded(name: str, out: torch.Tensor, truth: torch.Tensor, *, terms: int = 1, scale=0.0,
                  c: float = DEFAULT_C) -> Check:
    """A 16-bit output computed in fp32 and rounded once at the end (the log-prob kernels' logits
    gradient): ``|out - truth| <= ulp(max(|out|, |truth|)) / 2 + fp32_bound(truth, terms, scale, c)``.

    Tighter than ``check_vs_torch`` by the factor torch's 16-bit arithmetic loses: a relative scale
    error of 3e-4 moves a quarter of fp16 elements (ulp 4.9e-4 to 9.8e-4 relative) and a few percent
    of bf16 ones past their rounding midpoint, which fails here and passes 2x torch's error.
    """
    truth = _check_truth(truth)
    out64 = _as_f64(out, "out", truth)
    if out.dtype not in _SIXTEEN_BIT:
        raise ValueError(f"check_rounded is for float16/bfloat16 outputs, got {out.dtype} for {name!r}; "
                         "fp32 outputs use check_fp32")
    rule = (f"{str(out.dtype).replace('torch.', '')} of fp32: ulp/2 + "
            f"{float(c):g}*2^-24*(|truth|+scale+log2({terms}))")
    if truth.numel() == 0:
        return Check(name, 0.0, 0.0, True, rule)
    n_bad, where = _nonfinite_mismatch(out64, truth)
    finite = torch.isfinite(truth)
    zero = torch.zeros_like(truth)
    half_ulp = 0.5 * ulp(torch.maximum(torch.where(finite, out64, zero).abs(), torch.where(finite, truth, zero).abs()),
                         out.dtype)
    bound = torch.where(finite, half_ulp + fp32_bound(truth, terms=terms, scale=scale, c=c), zero)
    if n_bad:
        return _mismatch_check(name, rule, out64, truth, n_bad, where, float(bound[where]))
    if not bool(finite.any()):
        return Check(name, 0.0, 0.0, True, rule)
    err = torch.where(finite, out64 - truth, zero).abs()
    ratio = torch.where(finite, err / bound, torch.full_like(err, -1.0))
    worst = int(torch.argmax(ratio.reshape(-1)))
    worst_idx = _index(worst, truth.shape)
    ok = bool((err <= bound).all())
    n_over = int((err > bound).sum())
    detail = "" if ok else (f"{n_over} element(s) over; worst at {worst_idx}: out {out64[worst_idx].item():.6g} vs "
                            f"truth {truth[worst_idx].item():.9g} ({float(ratio.reshape(-1)[worst]):.3g}x its bound)")
    return Check(name, float(err.max()), float(bound[worst_idx]), ok, rule, detail)


#: Default number of standard errors a relative scale bias may reach (``check_bias``).
DEFAULT_SIGMAS = 6.0


def check_bias(name: str, out: torch.Tensor, truth: torch.Tensor, *, sigmas: float = DEFAULT_SIGMAS,
               floor: float | None = None) -> Check:
    """No systematic scale error: the least-squares relative scale ``s = <out - truth, truth> /
    <truth, truth>`` within ``sigmas`` standard errors of 0, or within ``floor``.

    The standard error is ``sqrt(sum((out - truth)^2 truth^2)) / <truth, truth>`` (the residuals'
    own spread: no torch result needed). Rounding errors average out over N elements, a scale error
    does not: a 3e-4 scale error of an fp16 tensor whose rounding noise is ~3e-4 relative stands
    at ~sqrt(N) standard errors, 70 for N = 4608, while a correct kernel's ``s`` stays within a few.
    ``floor`` (default: the output dtype's unit roundoff / 16: 3.1e-5 fp16, 2.4e-4 bf16, 3.7e-9
    fp32) keeps huge tensors, whose standard error vanishes, from failing on a last-bit systematic
    effect. ``max_abs_err`` reports ``|s|`` and ``bound`` the allowed ``|s|``. Meant for 16-bit
    outputs, next to ``check_vs_torch``: "2x torch's 16-bit error" cannot see a scale error below
    the 16-bit rounding (3e-4 < 4.9e-4 for fp16).
    """
    truth = _check_truth(truth)
    out64 = _as_f64(out, "out", truth)
    _check_positive("sigmas", sigmas)
    if floor is None:
        floor = unit_roundoff(out.dtype) / 16.0
    rule = f"scale bias: |<out-truth,truth>|/<truth,truth> <= max({float(sigmas):g} std errors, {floor:.2g})"
    n_bad, where = _nonfinite_mismatch(out64, truth)
    if n_bad:
        return _mismatch_check(name, rule, out64, truth, n_bad, where, floor)
    finite = torch.isfinite(truth)
    t = torch.where(finite, truth, torch.zeros_like(truth))
    r = torch.where(finite, out64 - truth, torch.zeros_like(truth))
    norm = float((t * t).sum())
    if norm == 0.0:
        return Check(name, 0.0, floor, True, rule)
    s = float((r * t).sum()) / norm
    std_err = math.sqrt(float((r * r * t * t).sum())) / norm
    bound = max(sigmas * std_err, floor)
    ok = abs(s) <= bound
    detail = "" if ok else (f"out is truth x (1 {'+' if s > 0 else '-'} {abs(s):.3g}), "
                            f"{abs(s) / max(std_err, 1e-300):.3g} std errors")
    return Check(name, abs(s), bound, ok, rule, detail)


def check_output(name: str, out: torch.Tensor, truth: torch.Tensor, *, torch_same: torch.Tensor | None = None,
                 terms: int = 1, scale=0.0) -> Check:
    """The rule for ``out``'s dtype: fp32/fp64 -> ``check_fp32`` (``terms``, ``scale``); fp16/bf16 ->
    ``check_vs_torch`` (``torch_same`` required: torch's result in that dtype on the same inputs)."""
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype in _FP32_RULE_DTYPES:
        return check_fp32(name, out, truth, terms=terms, scale=scale)
    if out.dtype in _SIXTEEN_BIT:
        if torch_same is None:
            raise ValueError(f"torch_same is required for the {out.dtype} output {name!r}: torch's own "
                             f"{out.dtype} result on the same inputs sets its bound")
        return check_vs_torch(name, out, torch_same, truth)
    raise ValueError(f"out has dtype {out.dtype}; check_output handles float64, float32, float16 and bfloat16")
