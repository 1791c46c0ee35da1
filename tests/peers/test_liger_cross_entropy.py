"""Liger-Kernel's own cross-entropy tests (``test/transformers/test_cross_entropy.py`` at
linkedin/Liger-Kernel@ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c) run against ``token_logprobs``
through ``_logprob_shims.LogprobCrossEntropy`` (per-token loss = minus our log-prob, reduced as
Liger reduces it). The peer's references (torch's ``CrossEntropyLoss``), tolerances and
assertions are unchanged; our adaptation, not its source. CPU: the Triton interpreter at small
shapes; ``gpu``: the peer's shapes (B, T, V) = (2, 4096, 32000) and (3, 423, 32000).

Peer parameters skipped, each a feature RL log-probs do not need (issue 37): ``label_smoothing``,
``lse_square_scale`` / ``return_z_loss`` (z-loss), ``weight`` (class weights), the structured
output (``return_token_accuracy``, ``return_predicted_tokens``), and Liger-internal tests
(``test_float32_internal`` calls Liger's kernel directly; ``test_correctness_functional`` tests
Liger's functional wrapper's z-loss outputs). Supported and run: reductions sum / mean / none,
``ignore_index``, ``softcap``, the out-of-range target error, forward-only, a non-last layer and
the true-class gradient of confident predictions (label smoothing 0).

Known and kept: in bf16, the peer's gradient check compares with torch's own bf16 backward. Where
it fails, our gradient is the closer of the two to fp64 (issue 37 measured, at Liger's GPU shapes,
ours 0.39-0.76% off fp64 against the peer's reference 5.4-6.1%): such cases are ``xfail(strict)``
with that reason and followed by our own fp64 check of the same case, never a looser tolerance.
"""

from __future__ import annotations

import pytest
import torch
from _logprob_shims import LogprobCrossEntropy
from torch.nn import CrossEntropyLoss

device = "cuda" if torch.cuda.is_available() else "cpu"

CPU_SHAPES = [(2, 8, 256), (3, 5, 259)]  # small enough for the interpreter; the second "weird"
GPU_SHAPES = [pytest.param(2, 4096, 32000, marks=pytest.mark.gpu), pytest.param(3, 423, 32000, marks=pytest.mark.gpu)]
SHAPES = CPU_SHAPES + GPU_SHAPES
PEER_TOLERANCES = [(1.0, torch.bfloat16, 1e-8, 5e-2), (1.0, torch.float32, 1e-8, 1e-6)]


class PeerReferenceWorse(AssertionError):
    """The peer's bf16 gradient check failed, and our gradient is the closer to fp64."""


PEER_WORSE = ("Liger's bf16 gradient check compares with torch's own bf16 backward, which at V 32000 is "
              "5.2% off fp64 against its rtol of 5%; ours is 0.39% off (within one bf16 ulp): the peer's "
              "reference is the worse of the two (issue 37: 5.4-6.1% vs 0.39-0.76% at the peer's GPU shapes)")


def _grad_vs_fp64(ours: torch.Tensor, peer_ref: torch.Tensor, x: torch.Tensor, target, reduction, ignore_index):
    """Our fp64 check of a case where the peer's bf16 reference fails: each element of our gradient
    within one bf16 ulp of the fp64 truth (twice its rounding), and our largest relative error no
    larger than the peer's bf16 reference's."""
    x64 = x.detach().double().requires_grad_()
    out = CrossEntropyLoss(reduction=reduction, ignore_index=ignore_index)(x64, target)
    out.backward(gradient=torch.ones_like(out))
    truth = x64.grad
    ulp = torch.exp2(torch.floor(torch.log2(truth.abs().clamp(min=2.0**-126))) - 7)
    assert ((ours.double() - truth).abs() <= ulp).all(), "our bf16 gradient is more than one ulp off fp64"
    nz = truth != 0
    ours_err = ((ours.double() - truth).abs()[nz] / truth.abs()[nz]).max()
    peer_err = ((peer_ref.double() - truth).abs()[nz] / truth.abs()[nz]).max()
    assert ours_err <= peer_err, f"ours {ours_err:.3e} worse than the peer's bf16 reference {peer_err:.3e}"
    return ours_err, peer_err


def _correctness_once(target_ce, B, T, V, reduction, scalar, dtype, atol, rtol, ignore_index=-100, upstream=None,
                      known_bf16_grad=False):
    """The peer's ``_test_correctness_once`` (with ``ignore_index`` and ``not_last_layer`` variants).
    A bf16 gradient check that fails is followed by our fp64 check: with ``known_bf16_grad`` it then
    raises PeerReferenceWorse (a strict xfail), otherwise the case is marked xfail at run time."""
    torch.manual_seed(0)
    torch_ce = CrossEntropyLoss(reduction=reduction, ignore_index=ignore_index)
    _tensor = torch.randn(B * T, V, device=device, dtype=dtype) * scalar
    _input = _tensor.detach().clone().requires_grad_(True)
    _input2 = _tensor.detach().clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,), device=device, dtype=torch.long)
    if ignore_index != -100 or upstream == "ignore":
        n = torch.randint(1, B * T // 2, (1,)).item()
        target[torch.randperm(B * T)[:n]] = ignore_index
    output = torch_ce(_input, target)
    output2 = target_ce(_input2, target)
    assert torch.allclose(output, output2, atol=atol, rtol=rtol)
    if upstream == "not_last_layer":
        grad_output = torch.rand_like(output)
        (output * 3).backward(gradient=grad_output)
        (output2 * 3).backward(gradient=grad_output)
    else:
        output.backward(gradient=torch.ones_like(output))
        output2.backward(gradient=torch.ones_like(output))
    if dtype == torch.bfloat16 and not torch.allclose(_input.grad, _input2.grad, atol=atol, rtol=rtol):
        ours_err, peer_err = _grad_vs_fp64(_input2.grad, _input.grad, _tensor, target, reduction, ignore_index)
        msg = f"{PEER_WORSE}; here ours {ours_err:.4f}, the peer's {peer_err:.4f}"
        if known_bf16_grad:
            raise PeerReferenceWorse(msg)
        pytest.xfail(msg)  # a shape not run on a CPU (the GPU shapes): known only when it runs
    assert torch.allclose(_input.grad, _input2.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("B, T, V", SHAPES)
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", PEER_TOLERANCES)
def test_correctness(B, T, V, scalar, dtype, reduction, atol, rtol):
    _correctness_once(LogprobCrossEntropy(reduction=reduction), B, T, V, reduction, scalar, dtype, atol, rtol)


@pytest.mark.parametrize("B, T, V, ignore_index", [(2, 8, 256, 2), (3, 5, 259, -123),
                                                    pytest.param(2, 4096, 32000, 2, marks=pytest.mark.gpu),
                                                    pytest.param(3, 423, 32000, -123, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", PEER_TOLERANCES)
def test_correctness_with_ignore_index(B, T, V, ignore_index, reduction, scalar, dtype, atol, rtol):
    ce = LogprobCrossEntropy(ignore_index=ignore_index, reduction=reduction)
    _correctness_once(ce, B, T, V, reduction, scalar, dtype, atol, rtol, ignore_index=ignore_index, upstream="ignore")


@pytest.mark.parametrize("B, T, V, softcap", [(2, 8, 256, 30.0), (3, 5, 259, 30.0),
                                               pytest.param(2, 4096, 32000, 30.0, marks=pytest.mark.gpu),
                                               pytest.param(3, 423, 32000, 30.0, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", PEER_TOLERANCES)
def test_correctness_with_softcap_once(B, T, V, softcap, reduction, scalar, dtype, atol, rtol):
    target_ce = LogprobCrossEntropy(softcap=softcap, reduction=reduction)
    torch_ce = CrossEntropyLoss(reduction=reduction)
    _tensor = torch.randn(B * T, V, device=device, dtype=dtype) * scalar
    _input = _tensor.detach().clone().requires_grad_(True)
    _input2 = _tensor.detach().clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,), device=device, dtype=torch.long)
    # the peer's reference: upcast as Liger does, cap, and back to the input dtype
    output = torch_ce(softcap * torch.tanh(_input.to(torch.float32) / softcap), target).to(dtype)
    output2 = target_ce(_input2, target)
    assert torch.allclose(output, output2, atol=atol, rtol=rtol)
    output.backward(gradient=torch.ones_like(output))
    output2.backward(gradient=torch.ones_like(output))
    assert torch.allclose(_input.grad, _input2.grad, atol=atol, rtol=rtol)


@pytest.mark.xfail(strict=True, raises=PeerReferenceWorse, reason=PEER_WORSE)
@pytest.mark.parametrize("reduction", ["sum"])
def test_correctness_bf16_vocab_32000(reduction):
    """``test_correctness``'s bf16 case at the peer's V (32000) and 16 rows: its gradient check fails
    by 2.8% of its tolerance; our own fp64 check of the same case runs first and must pass."""
    _correctness_once(LogprobCrossEntropy(reduction=reduction), 2, 8, 32000, reduction, 1.0, torch.bfloat16, 1e-8,
                      5e-2, known_bf16_grad=True)


@pytest.mark.parametrize("B, T, V", SHAPES)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("scalar, dtype, atol, rtol", PEER_TOLERANCES)
def test_correctness_not_last_layer(B, T, V, reduction, scalar, dtype, atol, rtol):
    _correctness_once(LogprobCrossEntropy(reduction=reduction), B, T, V, reduction, scalar, dtype, atol, rtol,
                      upstream="not_last_layer")


@pytest.mark.parametrize("B, T, V, ignore_index", [(2, 8, 256, 2), (3, 5, 259, -123),
                                                    pytest.param(2, 4096, 32000, 2, marks=pytest.mark.gpu),
                                                    pytest.param(3, 423, 32000, -123, marks=pytest.mark.gpu)])
def test_correctness_with_out_of_bounds_target_once(B, T, V, ignore_index):
    target_ce = LogprobCrossEntropy(ignore_index=ignore_index)
    torch.manual_seed(0)
    _tensor = torch.randn(B * T, V, device=device, dtype=torch.bfloat16)
    _input = _tensor.detach().clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,), device=device, dtype=torch.long)
    n = torch.randint(1, B * T // 2, (1,)).item()
    target[torch.randperm(B * T)[:n]] = ignore_index
    n_oob = torch.randint(1, B * T // 2, (1,)).item()
    target[torch.randperm(B * T)[:n_oob]] = torch.randint(V, 2 * V, (n_oob,)).to(device)
    try:
        _ = target_ce(_input, target)
        raise AssertionError("Should have thrown an error")  # the peer's `assert False`
    except AssertionError as e:
        assert "out of bounds" in str(e)


@pytest.mark.parametrize("B, T, V, ignore_index", [(2, 8, 256, -100), (3, 5, 259, 2),
                                                    pytest.param(2, 4096, 32000, -100, marks=pytest.mark.gpu),
                                                    pytest.param(3, 423, 32000, 2, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype, scalar, atol, rtol", [(torch.float32, 1.0, 1e-4, 1e-4),
                                                       (torch.float16, 1.0, 1e-2, 1e-2),
                                                       (torch.bfloat16, 1.0, 1e-2, 1e-2)])
def test_correctness_with_forward_only(B, T, V, ignore_index, reduction, dtype, scalar, atol, rtol):
    target_ce = LogprobCrossEntropy(ignore_index=ignore_index, reduction=reduction)
    torch.manual_seed(0)
    torch_ce = CrossEntropyLoss(reduction=reduction)
    _tensor = torch.randn(B * T, V, device=device, dtype=dtype) * scalar
    _input = _tensor.detach().clone()
    _input2 = _tensor.detach().clone()
    target = torch.randint(0, V, (B * T,), device=device, dtype=torch.long)
    with torch.no_grad():
        output = torch_ce(_input, target)
        output2 = target_ce(_input2, target)
        assert torch.allclose(output, output2, atol=atol, rtol=rtol)
    try:
        output2.backward(gradient=torch.ones_like(output))
    except RuntimeError as e:
        assert "does not require grad" in str(e)


@pytest.mark.parametrize("B, T, V", [(2, 8, 4096), pytest.param(2, 64, 4096, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_correctness_true_class_grad_confident_predictions(dtype, reduction, B, T, V):
    """The peer's test at label smoothing 0 (its only value we support); its shape (2, 64, 4096) on a
    GPU, 16 rows of it on a CPU."""
    torch.manual_seed(0)
    logits = torch.randn(B * T, V, device=device, dtype=torch.float32)
    target = torch.randint(0, V, (B * T,), device=device, dtype=torch.long)
    logits[torch.arange(B * T, device=device), target] = logits.max(dim=-1).values + 10.0
    _tensor = logits.to(dtype)
    _input = _tensor.detach().clone().requires_grad_(True)
    _input2 = _tensor.detach().clone().requires_grad_(True)
    _input_ref = _tensor.detach().clone().float().requires_grad_(True)
    torch_ce = CrossEntropyLoss(reduction=reduction)
    torch_ce(_input, target).backward()
    LogprobCrossEntropy(reduction=reduction)(_input2, target).backward()
    torch_ce(_input_ref, target).backward()
    rows = torch.arange(B * T, device=device)
    ref = _input_ref.grad[rows, target].double()
    torch_err = (_input.grad[rows, target].double() - ref).abs().max().item()
    liger_err = (_input2.grad[rows, target].double() - ref).abs().max().item()
    assert liger_err <= max(4 * torch_err, torch.finfo(dtype).tiny), (
        f"true-class grad error {liger_err:.3e} exceeds torch's {torch_err:.3e} (reduction={reduction}, dtype={dtype})")
