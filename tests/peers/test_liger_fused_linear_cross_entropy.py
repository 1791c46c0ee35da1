"""Liger-Kernel's own fused linear cross-entropy tests (``test/transformers/
test_fused_linear_cross_entropy.py`` at linkedin/Liger-Kernel@ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c)
against ``linear_token_logprobs`` through ``_logprob_shims.LogprobLMHeadCE`` (per-token loss =
minus our fused log-prob). The peer's reference (a torch Linear in the input dtype, then fp32
cross entropy), tolerances and assertions (its ``assert_verbose_allclose`` rule) are unchanged;
our adaptation, not its source. CPU: the peer's own small shape (4, 47, 31, 123) in the
interpreter, bf16 handed to the kernel as exact fp32 (the interpreter's bf16 ``tl.dot`` is wrong);
``gpu``: also (8, 128, 1024, 4096).

The second parameter set of ``test_correctness`` (and of ``test_correctness_with_forward_only``)
runs with what we support of it: ``ignore_index`` 42 and ``softcap`` 30 (Gemma 2's final-logit
cap; ``accum_dtype`` fp32 is what our kernels always accumulate in).

Peer parameters skipped (features RL log-probs do not need, issue 37): ``bias=True`` (the RL
models' LM heads have none), the rest of that second set (class weights, label smoothing 0.1,
z-loss ``lse_square_scale`` 1e-4 with ``return_z_loss``), token accuracy,
predicted tokens, token scaling, structured output, AMP (``test_amp``: autocast casting, Liger's
wrapper), ``test_correctness_functional`` (Liger's functional API against its own Function, with
z-loss and label smoothing).
"""

from __future__ import annotations

import pytest
import torch
from _logprob_shims import LogprobLMHeadCE, assert_close_like_liger, fused_logprobs

device = "cuda" if torch.cuda.is_available() else "cpu"

SHAPES = [(4, 47, 31, 123), pytest.param(8, 128, 1024, 4096, marks=pytest.mark.gpu)]
REDUCTIONS = [("mean", 1.0, torch.bfloat16, 5e-3, 5e-2), ("mean", 1.0, torch.float32, 1e-5, 5e-4),
              ("sum", 1.0, torch.bfloat16, 5e-0, 5e1), ("sum", 1.0, torch.float32, 1e-3, 5e-2)]


# the peer's (has_ce_weight, label_smoothing, ignore_index, lse_square_scale, softcap, return_z_loss,
# accum_dtype) sets, reduced to the two we run: (ignore_index, softcap)
PARAM_SETS = [(-100, None), (42, 30.0)]


class TorchLMHeadCE(torch.nn.Module):
    """The peer's ground truth: Linear in the input dtype, fp32 logits, its softcap, fp32 CE."""

    def __init__(self, H, V, dtype, ignore_index=-100, reduction="mean", softcap=None):
        super().__init__()
        self.lin = torch.nn.Linear(in_features=H, out_features=V, bias=False, dtype=dtype)
        self.ignore_index, self.reduction, self.softcap = ignore_index, reduction, softcap

    def forward(self, x, y):
        logits = self.lin(x).to(torch.float32)
        if self.softcap is not None and self.softcap != 0.0:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        return torch.nn.functional.cross_entropy(logits, y, reduction=self.reduction,
                                                 ignore_index=self.ignore_index).to(x.dtype)


def _pair(B, T, H, V, dtype, reduction, scalar, ignore_index=-100, softcap=None):
    torch.manual_seed(0)
    kw = dict(ignore_index=ignore_index, reduction=reduction, softcap=softcap)
    ref, ours = TorchLMHeadCE(H, V, dtype, **kw).to(device), LogprobLMHeadCE(H, V, dtype, **kw).to(device)
    ref.lin.weight.data = ours.lin.weight.data = torch.rand(V, H, device=device, dtype=dtype)
    _tensor = torch.randn(B * T, H, device=device, dtype=dtype) * scalar
    target = torch.randint(0, V, (B * T,), device=device, dtype=torch.long)
    n = torch.randint(1, B * T // 2, (1,)).item()
    target[torch.randperm(B * T)[:n]] = ignore_index
    return ref, ours, _tensor, target


@pytest.mark.parametrize("B, T, H, V", SHAPES)
@pytest.mark.parametrize("reduction, scalar, dtype, atol, rtol", REDUCTIONS)
@pytest.mark.parametrize("ignore_index, softcap", PARAM_SETS)
def test_correctness(B, T, H, V, scalar, dtype, reduction, ignore_index, softcap, atol, rtol):
    ref, ours, _tensor, target = _pair(B, T, H, V, dtype, reduction, scalar, ignore_index, softcap)
    _input1 = _tensor.detach().clone().requires_grad_(True)
    _input2 = _tensor.detach().clone().requires_grad_(True)
    output1 = ref(_input1, target)
    output2 = ours(_input2, target)
    assert_close_like_liger(output1, output2, atol=atol, rtol=rtol)
    grad_output = torch.ones_like(output1)
    output1.backward(gradient=grad_output)
    output2.backward(gradient=grad_output)
    assert_close_like_liger(_input1.grad, _input2.grad, atol=atol, rtol=rtol)
    assert_close_like_liger(ref.lin.weight.grad, ours.lin.weight.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("B, T, H, V", SHAPES)
@pytest.mark.parametrize("reduction, scalar, dtype, atol, rtol", REDUCTIONS)
@pytest.mark.parametrize("ignore_index, softcap", PARAM_SETS)
def test_correctness_with_forward_only(B, T, H, V, scalar, dtype, reduction, ignore_index, softcap, atol, rtol):
    ref, ours, _tensor, target = _pair(B, T, H, V, dtype, reduction, scalar, ignore_index, softcap)
    with torch.no_grad():
        output1 = ref(_tensor.detach().clone(), target)
        output2 = ours(_tensor.detach().clone(), target)
        assert_close_like_liger(output1, output2, atol=atol, rtol=rtol)


@pytest.mark.parametrize("B, T, H, V", [(2, 16, 32, 64), (1, 32, 64, 128)])
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float32, 1e-4, 1e-4)])
def test_correctness_reduction_none_per_token_grad_output(B, T, H, V, dtype, atol, rtol):
    """The peer's regression test: a non-uniform per-token upstream gradient with reduction none."""
    torch.manual_seed(42)
    BT = B * T
    _input = torch.randn(BT, H, device=device, dtype=dtype) * 0.1
    weight = torch.randn(V, H, device=device, dtype=dtype) * 0.1
    target = torch.randint(0, V, (BT,), device=device, dtype=torch.long)
    grad_output = torch.rand(BT, device=device, dtype=dtype) + 0.5

    def run(loss_fn):
        x = _input.clone().requires_grad_(True)
        w = weight.clone().requires_grad_(True)
        loss = loss_fn(x, w)
        loss.backward(grad_output)
        return loss, x.grad, w.grad

    ref = run(lambda x, w: torch.nn.functional.cross_entropy(torch.nn.functional.linear(x, w), target,
                                                             reduction="none"))
    ours = run(lambda x, w: -fused_logprobs(x, w, target))
    for a, b in zip(ours, ref):
        assert_close_like_liger(a.detach(), b.detach(), atol=atol, rtol=rtol)
