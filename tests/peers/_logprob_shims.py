"""Thin shims that let Liger-Kernel's and verl's own log-prob / cross-entropy tests call our kernels
(``tests/peers/test_liger_*.py``, ``tests/peers/test_verl_*.py``). A shim only renames: the loss is
minus our log-prob, reduced as the peer reduces it, in the dtype the peer returns; our ValueError for
an out-of-range target becomes the AssertionError the peer's test expects. On a CPU, Triton 3.9's
interpreter multiplies bf16 bit patterns in ``tl.dot`` (triton-lang/triton#11584), so the fused
shims hand the kernel the bf16 values converted exactly to fp32 (and exact fp32 products, "ieee");
the gradients come back in bf16. The kernels themselves are never changed for a test."""

from __future__ import annotations

import torch

from polytrace_kernels.logprob import linear_token_logprobs, token_logprobs


def on_cpu(t: torch.Tensor) -> bool:
    return t.device.type == "cpu"


def reduce_loss(per_token: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return per_token
    if reduction == "sum":
        return per_token.sum()
    return per_token.sum() / (target != ignore_index).sum()  # "mean" over the non-ignored tokens


def _as_assertion(fn):
    try:
        return fn()
    except ValueError as exc:  # Liger asserts "Target ... is out of bounds": the shim maps our error
        if "is outside" in str(exc):
            raise AssertionError(f"target out of bounds: {exc}") from exc
        raise


class LogprobCrossEntropy(torch.nn.Module):
    """``LigerCrossEntropyLoss(ignore_index, reduction, softcap)`` as minus ``token_logprobs``."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", softcap: float | None = None):
        super().__init__()
        self.ignore_index, self.reduction, self.softcap = ignore_index, reduction, softcap

    def forward(self, logits, target):
        lp = _as_assertion(lambda: token_logprobs(logits, target, ignore_index=self.ignore_index,
                                                  softcap=self.softcap))
        return reduce_loss(-lp, target, self.ignore_index, self.reduction).to(logits.dtype)


class _ExactFp32(torch.autograd.Function):
    """bf16 -> fp32 exactly on the way in, the gradient back to bf16 on the way out (CPU only)."""

    @staticmethod
    def forward(ctx, x):
        ctx.dtype = x.dtype
        return x.float()

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dtype)


def fused_inputs(hidden, weight):
    """What the fused kernel receives: on a CPU, bf16 inputs as exact fp32 values; fp32 inputs with
    exact fp32 products ("ieee", as the peers' fp32 torch references compute, not tf32)."""
    if on_cpu(hidden) and hidden.dtype == torch.bfloat16:
        return _ExactFp32.apply(hidden), _ExactFp32.apply(weight), "ieee"
    return hidden, weight, "ieee" if hidden.dtype == torch.float32 else "tf32"


def fused_logprobs(hidden, weight, target, ignore_index=-100, temperature=1.0, return_entropy=False, softcap=None):
    h, w, precision = fused_inputs(hidden, weight)
    return _as_assertion(lambda: linear_token_logprobs(h, w, target, temperature, return_entropy, ignore_index,
                                                       fp32_precision=precision, softcap=softcap))


def assert_close_like_liger(t1: torch.Tensor, t2: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-8) -> None:
    """Liger's ``assert_verbose_allclose`` rule: |t1 - t2| <= atol + rtol |t2| elementwise, and NaN
    / +inf / -inf where, and only where, the other has them."""
    assert t1.shape == t2.shape, "Input tensors must have the same shape."
    bad = (t1 - t2).abs() > atol + rtol * t2.abs()
    for test in (torch.isnan, torch.isposinf, torch.isneginf):
        bad |= test(t1) ^ test(t2)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements differ beyond atol {atol}, rtol {rtol}"


class LogprobLMHeadCE(torch.nn.Module):
    """Liger's ``LigerLMHeadCE`` test module (a bias-free Linear + fused CE, with its ``softcap``) on
    our fused log-prob."""

    def __init__(self, H: int, V: int, dtype: torch.dtype, ignore_index: int = -100, reduction: str = "mean",
                 softcap: float | None = None):
        super().__init__()
        self.lin = torch.nn.Linear(in_features=H, out_features=V, bias=False, dtype=dtype)
        self.ignore_index, self.reduction, self.softcap = ignore_index, reduction, softcap

    def forward(self, x, y):
        lp = fused_logprobs(x, self.lin.weight, y, self.ignore_index, softcap=self.softcap)
        return reduce_loss(-lp, y, self.ignore_index, self.reduction).to(x.dtype)


def verl_linear_cross_entropy(hidden, weight, labels, temperature):
    """verl's ``linear_cross_entropy(hidden [1, T, H], weight [V, H], labels [1, T], temperature)``
    -> (log-probs [T], entropies [T]) on our fused kernel."""
    return fused_logprobs(hidden.squeeze(0), weight, labels.reshape(-1), temperature=temperature,
                          return_entropy=True)


def verl_vocab_parallel_entropy_worker(rank: int, world: int, init_file: str, case: dict, out_dir: str) -> None:
    """One tensor-parallel rank of verl's ``test_vocab_parallel_entropy`` on a gloo group: this
    rank's even vocabulary slice through ``vocab_parallel_token_logprobs`` (verl's
    ``vocab_parallel_entropy`` takes no tokens: ours are given and only the entropy is used)."""
    import os

    import torch.distributed as dist

    from polytrace_kernels.logprob import vocab_parallel_token_logprobs

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        logits, target, grad_output = case["logits"], case["target"], case["grad_output"]
        per = logits.shape[1] // world
        local = logits.clone().detach()[:, rank * per:(rank + 1) * per].requires_grad_()
        _, entropy = vocab_parallel_token_logprobs(local, target, rank * per, return_entropy=True)
        entropy.backward(grad_output)
        torch.save({"entropy": entropy.detach(), "grad": local.grad, "local": local.detach()},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
