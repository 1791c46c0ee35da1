"""The accuracy rule every kernel test uses (kernels/tolerance.py): bounds from the fp64 truth."""

from __future__ import annotations

import json
import math

import pytest
import torch

from polytrace_kernels.tolerance import (
    DEFAULT_C,
    FP32_UNIT_ROUNDOFF,
    Check,
    check_bias,
    check_fp32,
    check_output,
    check_rounded,
    check_vs_torch,
    fp32_bound,
    ulp,
    unit_roundoff,
)

U = FP32_UNIT_ROUNDOFF


def _truth(n=64, seed=0, scale=5.0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


def test_fp32_bound_formula():
    truth = torch.tensor([-3.0, 0.0, 10.0], dtype=torch.float64)
    b = fp32_bound(truth, terms=1024, scale=2.0, c=4.0)
    assert torch.equal(b, 4.0 * 2.0**-24 * (truth.abs() + 2.0 + 10.0) + 2.0**-126)
    assert FP32_UNIT_ROUNDOFF == 2.0**-24 and DEFAULT_C == 8.0
    # per-row scale tensors broadcast
    rows = torch.zeros(2, 3, dtype=torch.float64)
    b = fp32_bound(rows, scale=torch.tensor([[1.0], [100.0]]))
    assert torch.allclose(b[1], torch.full((3,), DEFAULT_C * U * 100.0, dtype=torch.float64))
    assert torch.allclose(b[0], torch.full((3,), DEFAULT_C * U, dtype=torch.float64))


def test_fp32_rounding_passes_and_small_biases_fail():
    """fp32 rounding of the truth passes; a 2e-4 bias, a 1.0003 scale and a one-ulp-of-bf16 error
    on a log-prob-sized value fail, and a bias of a few ulps passes (the rule is not bitwise)."""
    truth = -_truth().abs() - 1.0  # log-prob-like, -1 .. -20
    ok = check_fp32("rounded", truth.float(), truth, terms=1031, scale=12.0)
    assert ok.ok and ok.max_abs_err <= 0.5 * ulp_max(truth)
    few_ulps = truth.float() * (1 + 4 * U)
    assert check_fp32("4 ulps", few_ulps, truth, terms=1031, scale=12.0).ok
    for name, bad in (("bias 2e-4", truth + 2e-4), ("scale 1.0003", truth * 1.0003),
                      ("bf16-rounded", truth.to(torch.bfloat16).float())):
        c = check_fp32(name, bad.float(), truth, terms=1031, scale=12.0)
        assert not c.ok, c.message()
        assert "fp32: 8*2^-24" in c.message() and c.message().startswith(f"{name}: max |err|")


def ulp_max(t):
    return float(t.abs().max()) * 2.0**-23


def test_nonfinite_pattern_must_match():
    truth = torch.tensor([1.0, float("inf"), float("-inf"), float("nan"), -2.0], dtype=torch.float64)
    good = truth.float().clone()
    assert check_fp32("same", good, truth).ok
    for i, val in ((1, float("-inf")), (2, 5.0), (3, 0.0), (0, float("nan")), (4, float("inf")), (1, float("nan"))):
        bad = good.clone()
        bad[i] = val
        c = check_fp32("bad", bad, truth)
        assert not c.ok and c.max_abs_err == math.inf, (i, val)
        assert f"first at ({i},)" in c.message()
    all_nan = torch.full((3,), float("nan"), dtype=torch.float64)
    assert check_fp32("all-nan", all_nan.float(), all_nan).ok


def test_check_vs_torch_rule_and_floor():
    truth = _truth(256, seed=1, scale=1.0)
    same = truth.half()
    ours = truth.half()
    c = check_vs_torch("exact-rounding", ours, same, truth)
    assert c.ok and c.rule == "2x torch float16"
    torch_err = float((same.double() - truth).abs().max())
    assert c.bound == pytest.approx(max(2 * torch_err, unit_roundoff(torch.float16) * float(truth.abs().max())))
    assert not check_vs_torch("4 ulps off", (truth * (1 + 8 * 2.0**-11)).half(), same, truth).ok
    # torch exact by luck: the floor (one rounding of the largest value) still admits our rounding
    exact = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    assert check_vs_torch("floor", exact.half(), exact, exact).ok
    # a torch overflow does not make the bound infinite
    big = torch.tensor([1.0, 1e6], dtype=torch.float64)
    c = check_vs_torch("overflow", torch.tensor([1.5, 1e6]), torch.tensor([1.0, float("inf")]), big)
    assert not c.ok and math.isfinite(c.bound)


def test_check_output_picks_the_rule_from_the_dtype():
    truth = -_truth().abs()
    fp32_from_bf16_path = (truth * 1.0003).float()  # the bug the old rule let through
    same_bf16 = truth.to(torch.bfloat16)
    assert check_vs_torch("old-rule", fp32_from_bf16_path, same_bf16, truth).ok  # why fp32 must not use it
    c = check_output("logprob", fp32_from_bf16_path, truth, torch_same=same_bf16, terms=1000, scale=10.0)
    assert not c.ok and c.rule.startswith("fp32")
    c16 = check_output("out", truth.half(), truth, torch_same=truth.half())
    assert c16.ok and c16.rule.startswith("2x torch")
    with pytest.raises(ValueError, match="torch_same is required for the torch.bfloat16 output 'dq'"):
        check_output("dq", same_bf16, truth)
    with pytest.raises(ValueError, match="out has dtype torch.int32"):
        check_output("ids", truth.int(), truth)


def test_bad_arguments_name_themselves():
    truth = _truth(8)
    with pytest.raises(ValueError, match="truth must be float64"):
        check_fp32("x", truth.float(), truth.float())
    with pytest.raises(ValueError, match=r"out has shape \(7,\) but truth has shape \(8,\)"):
        check_fp32("x", truth[:7].float(), truth)
    with pytest.raises(ValueError, match="terms must be a positive int"):
        fp32_bound(truth, terms=0)
    with pytest.raises(ValueError, match="scale must be a non-negative finite number"):
        fp32_bound(truth, scale=float("nan"))
    with pytest.raises(ValueError, match="scale has shape"):
        fp32_bound(truth, scale=torch.ones(3))
    with pytest.raises(ValueError, match="c must be a positive finite number"):
        fp32_bound(truth, c=0)
    with pytest.raises(ValueError, match="factor must be a positive finite number"):
        check_vs_torch("x", truth.half(), truth.half(), truth, factor=-1)


def test_check_is_json_safe_and_one_line():
    truth = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    bad = check_fp32("nan-hidden", torch.tensor([1.0, 0.0]), truth)
    d = bad.as_dict()
    assert set(d) == {"name", "max_abs_err", "bound", "ok", "rule"} and d["max_abs_err"] is None
    json.dumps(d, allow_nan=False)
    assert "\n" not in bad.message() and not bad.ok
    empty = check_fp32("empty", torch.zeros(0), torch.zeros(0, dtype=torch.float64))
    assert empty.ok and empty.as_dict()["max_abs_err"] == 0.0
    assert isinstance(empty, Check)


def test_ulp_matches_nextafter():
    x = torch.tensor([1.0, 1.5, 0.3, -7.0, 65504.0, 1e-6, 0.0], dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        r = x.to(dtype)
        nxt = torch.nextafter(r.float(), torch.full_like(r.float(), math.inf)) if dtype == torch.float32 else None
        u = ulp(r, dtype)
        if nxt is not None:
            assert torch.equal(u[:4], (nxt.double() - r.double())[:4].abs())
        assert torch.all(u > 0)
    assert ulp(torch.tensor([1.0]), torch.float16).item() == 2.0**-10
    assert ulp(torch.tensor([0.0]), torch.float16).item() == 2.0**-24  # subnormal spacing


def test_check_rounded_catches_sub_ulp_scale_errors():
    """One rounding of an fp32 result: correct rounding passes, a 2e-4 scale error (below fp16's
    half ulp, invisible to 2x torch's error) fails, in fp16 and bf16."""
    truth = torch.randn(4000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16):
        assert check_rounded("ok", truth.to(dtype), truth).ok
        c = check_rounded("bug", (truth * 1.0002).to(dtype), truth)
        assert not c.ok and "element(s) over" in c.message()
        assert check_vs_torch("2x torch", (truth * 1.0002).to(dtype), truth.to(dtype), truth).ok
    with pytest.raises(ValueError, match="check_rounded is for float16/bfloat16 outputs"):
        check_rounded("x", truth.float(), truth)


def test_check_bias_sees_a_scale_error_below_the_rounding():
    gen = torch.Generator().manual_seed(4)
    truth = torch.randn(4096, generator=gen, dtype=torch.float64)
    noise = torch.randn(4096, generator=gen, dtype=torch.float64) * 3e-4 * truth.abs()
    assert check_bias("ok", (truth + noise).half(), truth).ok
    for scale in (1.0002, 0.9997):
        c = check_bias("bug", (truth * scale + noise).half(), truth)
        assert not c.ok and abs(c.max_abs_err - abs(scale - 1)) < 5e-5, c.message()
    # a huge tensor: the floor (unit roundoff / 16) keeps a last-bit effect from failing
    assert check_bias("floor", (truth * (1 + 1e-6)).float(), truth, floor=1e-5).ok
    assert not check_bias("floor", (truth * (1 + 1e-4)).float(), truth, floor=1e-5).ok
    assert check_bias("zeros", torch.zeros(3), torch.zeros(3, dtype=torch.float64)).ok
    with pytest.raises(ValueError, match="sigmas must be"):
        check_bias("x", truth.half(), truth, sigmas=0)
