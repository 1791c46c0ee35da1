"""Public functions, launches and autograd for token log-probs and entropies.

- ``token_logprobs(logits, tokens, ...)``: from materialised logits [T, V].
- ``linear_token_logprobs(hidden, weight, tokens, ...)``: from hidden states [T, H] and the
  LM-head weight [V, H], without ever holding [T, V] logits.

Launch configs: ``config=None`` takes a tuned config for this device and shape bucket when
``polytrace tune`` recorded one (``kernels/_tuning.py``), else the built-in default. The bucket is
computed from the vocabulary size, hidden size and dtype only, never from the number of tokens:
a config that changed with T would change the order of a row's sums, and with it the last bits
of its log-prob (see "Batch invariance" in ``__init__.py``).

Launch configs and tuning live in ``configs.py`` and argument checks in ``validation.py``; the
names the package and ``polytrace tune`` reach through ``api`` are imported here.
"""

from __future__ import annotations

import torch
import triton

from . import kernel as K
from . import kernel_bwd as KB
from .configs import (
    LINEAR_TUNING_KERNEL,
    TUNING_KERNEL,
    _check_block,
    _interpreting,
    _linear_bwd_default,
    _linear_fwd_default,
    _logits_bwd_default,
    _logits_fwd_default,
    _resolve_config,
    dot_precision,
    linear_tuning_bucket,
    tuning_bucket,
)
from .configs import LINEAR_TUNING_SPACE as LINEAR_TUNING_SPACE
from .configs import TUNING_SPACE as TUNING_SPACE
from .configs import default_linear_bwd_config as default_linear_bwd_config
from .configs import default_linear_fwd_config as default_linear_fwd_config
from .configs import default_logits_bwd_config as default_logits_bwd_config
from .configs import default_logits_fwd_config as default_logits_fwd_config
from .configs import device_capability as device_capability
from .validation import (
    _check_device,
    _check_logits_call,
    _check_matrix,
    _check_scalars,
    _check_softcap,
    _check_token_range,
    _check_tokens,
)


def _zeroed_on_ignored(g: torch.Tensor | None, tokens: torch.Tensor, ignore_index: int, n: int, device):
    if g is None:
        return torch.zeros(n, dtype=torch.float32, device=device)
    return g.float().masked_fill(tokens == ignore_index, 0.0).contiguous()


# ---------------------------------------------------------------------------------------------
# Logits kernels
# ---------------------------------------------------------------------------------------------


def _logits_forward(logits, tokens, temperature, return_entropy, ignore_index, config, softcap=None):
    n_rows, vocab = logits.shape
    dev = logits.device
    logprob = torch.empty(n_rows, dtype=torch.float32, device=dev)
    stats = torch.empty((2, n_rows), dtype=torch.float32, device=dev)  # running max, log of the sum
    entropy = torch.empty(n_rows if return_entropy else 0, dtype=torch.float32, device=dev)
    if n_rows == 0:
        return logprob, entropy, stats
    cfg = _resolve_config(TUNING_KERNEL, tuning_bucket(vocab, logits.dtype), dev,
                          _logits_fwd_default(logits.dtype, dev), config)
    _check_block(cfg, "BLOCK_V", "config")
    block_v = min(cfg["BLOCK_V"], max(16, triton.next_power_of_2(vocab)))
    # One compiled layout per vocabulary size (see kernel.token_logprobs_fwd_kernel_generic).
    aligned = vocab % 16 == 0
    if aligned and (logits.data_ptr() % 16 or (n_rows > 1 and logits.stride(0) % 16)):
        # Rare (a view at an odd element offset): an aligned copy keeps the aligned layout, so the
        # row's result matches the same row anywhere else.
        logits = logits.clone(memory_format=torch.contiguous_format)
    stride = logits.stride(0) if n_rows > 1 else vocab
    fn = K.token_logprobs_fwd_kernel if aligned else K.token_logprobs_fwd_kernel_generic
    fn[(n_rows,)](logits, tokens, logprob, entropy if return_entropy else logprob, stats[0], stats[1],
                  stride, vocab, temperature, softcap or 1.0, ignore_index,
                  SCALE=temperature != 1.0, EXACT_DIV=logits.dtype == torch.float32, SOFTCAP=softcap is not None,
                  RETURN_ENTROPY=return_entropy, BLOCK_V=block_v,
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return logprob, entropy, stats


def _logits_backward(logits, tokens, stats, entropy, g_lp, g_ent, temperature, ignore_index, config,
                     softcap=None):
    n_rows, vocab = logits.shape
    dev = logits.device
    grad = torch.empty((n_rows, vocab), dtype=logits.dtype, device=dev)
    if n_rows == 0:
        return grad
    cfg = _resolve_config("token_logprobs_bwd", tuning_bucket(vocab, logits.dtype), dev,
                          _logits_bwd_default(logits.dtype, dev), config, "backward_config")
    _check_block(cfg, "BLOCK_V", "backward_config")
    block_v = min(cfg["BLOCK_V"], max(16, triton.next_power_of_2(vocab)))
    has_lp, has_ent = g_lp is not None, g_ent is not None
    g_lp = g_lp.contiguous() if has_lp else stats[0]
    g_ent = g_ent.contiguous() if has_ent else stats[0]
    KB.token_logprobs_bwd_kernel[(n_rows,)](
        logits, tokens, stats[0], stats[1], entropy if has_ent else stats[0], g_lp, g_ent, grad,
        logits.stride(0) if n_rows > 1 else vocab, grad.stride(0), vocab, temperature, softcap or 1.0, ignore_index,
        SCALE=temperature != 1.0, EXACT_DIV=logits.dtype == torch.float32, SOFTCAP=softcap is not None,
        HAS_GRAD_LP=has_lp,
        HAS_GRAD_ENT=has_ent, BLOCK_V=block_v, ROUND_BF16=_interpreting() and logits.dtype == torch.bfloat16,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return grad


def _save_logits_ctx(ctx, logits, tokens, stats, entropy, return_entropy, temperature, ignore_index,
                     backward_config, softcap, n_inputs: int):
    """What the logits backward needs (shared with ``parallel.py``, which saves the global stats)."""
    ctx.save_for_backward(logits, tokens, stats, entropy)
    ctx.args = (temperature, ignore_index, backward_config, softcap)
    ctx.n_inputs = n_inputs
    ctx.set_materialize_grads(False)
    if not return_entropy:
        ctx.mark_non_differentiable(entropy)


class _LogitsBackward(torch.autograd.Function):
    """The backward of every logits-kernel Function: the gradient of the logits (first input) from
    what ``_save_logits_ctx`` saved, None for the other inputs."""

    @staticmethod
    def backward(ctx, g_lp, g_ent):
        logits, tokens, stats, entropy = ctx.saved_tensors
        if g_lp is None and g_ent is None:
            return (None,) * ctx.n_inputs
        temperature, ignore_index, backward_config, softcap = ctx.args
        grad = _logits_backward(logits, tokens, stats, entropy, g_lp, g_ent, temperature, ignore_index,
                                backward_config, softcap)
        return (grad,) + (None,) * (ctx.n_inputs - 1)


class _TokenLogprobs(_LogitsBackward):
    @staticmethod
    def forward(ctx, logits, tokens, temperature, return_entropy, ignore_index, config, backward_config, softcap):
        logprob, entropy, stats = _logits_forward(logits, tokens, temperature, return_entropy, ignore_index,
                                                  config, softcap)
        _save_logits_ctx(ctx, logits, tokens, stats, entropy, return_entropy, temperature, ignore_index,
                         backward_config, softcap, n_inputs=8)
        return logprob, entropy


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0,
                   return_entropy: bool = False, ignore_index: int = -100, *,
                   config: dict | None = None, backward_config: dict | None = None,
                   check_tokens: bool = True, softcap: float | None = None):
    """Log-probabilities of ``tokens`` under ``softmax(logits / temperature)``, in fp32.

    Args:
        logits: [T, V] bf16, fp16 or fp32, stride 1 along V, any row stride.
        tokens: [T] int32 or int64, in [0, V) or ``ignore_index``.
        temperature: positive number; logits are divided by it.
        return_entropy: also return the entropy of each row's distribution, in fp32.
        ignore_index: rows whose token equals it give 0 (log-prob and entropy) and no gradient.
        config: forward launch config ``{"BLOCK_V", "num_warps", "num_stages"}``; None picks the
            tuned or default config for this device, vocabulary size and dtype.
        backward_config: the same for the backward kernel.
        check_tokens: check the token range on the host (one device sync). With False an
            out-of-range token yields NaN instead of an error.
        softcap: positive number or None: the logits become ``softcap * tanh(logits / softcap)``
            before the temperature (Gemma 2's final-logit cap, 30, as HF and verl apply it).

    Returns ``logprob`` [T], or ``(logprob, entropy)``. Differentiable with respect to ``logits``
    through both outputs: the backward reads the logits once and writes the gradient once.
    """
    temperature, ignore_index, softcap = _check_logits_call(logits, tokens, temperature, ignore_index, softcap,
                                                           "[tokens, vocab]")
    if check_tokens:
        _check_token_range(tokens, logits.shape[1], ignore_index)
    tokens = tokens.contiguous()  # [T] ints: a copy costs nothing next to the logits
    logprob, entropy = _TokenLogprobs.apply(logits, tokens, temperature, bool(return_entropy), ignore_index,
                                            config, backward_config, softcap)
    return (logprob, entropy) if return_entropy else logprob


# ---------------------------------------------------------------------------------------------
# Fused LM-head kernels
# ---------------------------------------------------------------------------------------------

_COMBINE_BLOCK_T = 128
_DEFAULT_CHUNK_BYTES = 512 * 2**20  # d(logits) of one vocabulary chunk: [T, chunk] in the input dtype


FP32_PRECISIONS = ("tf32", "ieee")


def _dot_precision(dtype, fp32_precision: str = "tf32") -> str | None:
    """tl.dot's input precision: for fp32 inputs tf32 tensor cores by default (inputs rounded to 10
    mantissa bits, ~5e-4 relative per product; the exact "ieee" path runs on the FP32 pipe, ~8-15x
    slower on Hopper: 67 vs 495 TF/s dense) or "ieee" when exactness is asked; bf16/fp16: the default."""
    return dot_precision(dtype, fp32_precision)


def _linear_forward(hidden, weight, tokens, temperature, return_entropy, ignore_index, config, fp32_precision="tf32",
                    softcap=None):
    n_rows, hidden_size = hidden.shape
    vocab = weight.shape[0]
    dev = hidden.device
    logprob = torch.empty(n_rows, dtype=torch.float32, device=dev)
    stats = torch.empty((2, n_rows), dtype=torch.float32, device=dev)  # max, log of the sum
    entropy = torch.empty(n_rows if return_entropy else 0, dtype=torch.float32, device=dev)
    if n_rows == 0:
        return logprob, entropy, stats
    cfg = _resolve_config(LINEAR_TUNING_KERNEL, linear_tuning_bucket(vocab, hidden_size, hidden.dtype), dev,
                          _linear_fwd_default(hidden.dtype, dev), config)
    for key in ("BLOCK_T", "BLOCK_V", "BLOCK_K"):
        _check_block(cfg, key, "config")
    bt, bv, bk = cfg["BLOCK_T"], cfg["BLOCK_V"], cfg["BLOCK_K"]
    n_vblocks = triton.cdiv(vocab, bv)
    nsplit = min(cfg["NSPLIT"], n_vblocks)
    vblocks_per_split = triton.cdiv(n_vblocks, nsplit)
    part = torch.empty((4, nsplit, n_rows), dtype=torch.float32, device=dev)
    grid = (triton.cdiv(n_rows, bt) * nsplit,)
    # Rows that are not ignore_index first (stable, so a row keeps its neighbours' order): the token
    # blocks of ignored rows (prompt tokens) run no GEMM. On the device, no host sync.
    active = tokens != ignore_index
    order = torch.argsort((~active).to(torch.uint8), stable=True)  # key 0: a row to compute, 1: ignored
    n_active = active.sum(dtype=torch.int32).reshape(1)
    K.linear_logprobs_fwd_kernel[grid](
        hidden, weight, tokens, order, n_active, part, n_rows, vocab, hidden_size,
        hidden.stride(0) if n_rows > 1 else hidden_size, weight.stride(0) if vocab > 1 else hidden_size,
        1.0 / temperature, softcap or 1.0, vblocks_per_split,
        NSPLIT=nsplit, SCALE=temperature != 1.0, SOFTCAP=softcap is not None, RETURN_ENTROPY=return_entropy,
        EVEN_K=hidden_size % bk == 0,
        EVEN_V=vocab % bv == 0, BLOCK_T=bt, BLOCK_V=bv, BLOCK_K=bk,
        DOT_PRECISION=_dot_precision(hidden.dtype, fp32_precision),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    combine_bt = _COMBINE_BLOCK_T if dev.type == "cuda" else 64
    K.linear_logprobs_combine_kernel[(triton.cdiv(n_rows, combine_bt),)](
        part, tokens, logprob, entropy if return_entropy else logprob, stats[0], stats[1], n_rows, vocab,
        ignore_index, NSPLIT=nsplit, RETURN_ENTROPY=return_entropy, BLOCK_T=combine_bt, num_warps=4)
    return logprob, entropy, stats


def _linear_backward(hidden, weight, tokens, stats, entropy, g_lp, g_ent, temperature, ignore_index,
                     need_hidden, need_weight, backward_config, chunk_bytes, fp32_precision="tf32", softcap=None):
    n_rows, hidden_size = hidden.shape
    vocab = weight.shape[0]
    dev = hidden.device
    if n_rows == 0:
        return (torch.zeros_like(hidden) if need_hidden else None,
                torch.zeros_like(weight) if need_weight else None)
    # every element of both is written below (one matmul per vocabulary chunk, or the fp32 copy)
    grad_hidden = torch.empty((n_rows, hidden_size), dtype=hidden.dtype, device=dev) if need_hidden else None
    grad_weight = torch.empty((vocab, hidden_size), dtype=weight.dtype, device=dev) if need_weight else None
    cfg = _resolve_config("linear_token_logprobs_bwd", linear_tuning_bucket(vocab, hidden_size, hidden.dtype),
                          dev, _linear_bwd_default(hidden.dtype, dev), backward_config, "backward_config")
    for key in ("BLOCK_T", "BLOCK_V", "BLOCK_K"):
        _check_block(cfg, key, "backward_config")
    bt, bv, bk = cfg["BLOCK_T"], cfg["BLOCK_V"], cfg["BLOCK_K"]
    has_ent = g_ent is not None
    g_lp = _zeroed_on_ignored(g_lp, tokens, ignore_index, n_rows, dev)
    g_ent = _zeroed_on_ignored(g_ent, tokens, ignore_index, n_rows, dev) if has_ent else g_lp

    # Chunk the vocabulary so d(logits) never exceeds chunk_bytes: each chunk's d(weight) rows
    # come from one matmul over all tokens (one rounding); d(hidden) sums the chunks in fp32.
    elem = hidden.element_size()
    chunk = max(bv, (chunk_bytes // max(1, n_rows * elem)) // bv * bv)
    chunk = min(chunk, vocab)
    n_chunks = triton.cdiv(vocab, chunk)
    dlogits = torch.empty((n_rows, chunk), dtype=hidden.dtype, device=dev)
    acc_hidden = torch.zeros((n_rows, hidden_size), dtype=torch.float32, device=dev) \
        if need_hidden and n_chunks > 1 else None
    precision = _dot_precision(hidden.dtype, fp32_precision)
    for v0 in range(0, vocab, chunk):
        cols = min(chunk, vocab - v0)
        d = dlogits[:, :cols]
        grid = (triton.cdiv(n_rows, bt) * triton.cdiv(cols, bv),)
        KB.linear_dlogits_kernel[grid](
            hidden, weight, tokens, stats[0], stats[1], entropy if has_ent else stats[0], g_lp, g_ent, d,
            n_rows, vocab, hidden_size, v0, cols, hidden.stride(0) if n_rows > 1 else hidden_size,
            weight.stride(0) if vocab > 1 else hidden_size, d.stride(0), 1.0 / temperature, softcap or 1.0,
            SCALE=temperature != 1.0, SOFTCAP=softcap is not None, HAS_GRAD_ENT=has_ent, EVEN_K=hidden_size % bk == 0,
            BLOCK_T=bt, BLOCK_V=bv, BLOCK_K=bk, GROUP_T=cfg["GROUP"], DOT_PRECISION=precision,
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        w_chunk = weight[v0:v0 + cols]
        if need_weight:
            torch.mm(d.t(), hidden, out=grad_weight[v0:v0 + cols])
        if need_hidden:
            if acc_hidden is None:
                torch.mm(d, w_chunk, out=grad_hidden)
            else:
                grid = (triton.cdiv(n_rows, bt) * triton.cdiv(hidden_size, bv),)
                KB.matmul_accumulate_kernel[grid](
                    d, w_chunk, acc_hidden, n_rows, hidden_size, cols,
                    d.stride(0), 1, w_chunk.stride(0), 1, acc_hidden.stride(0),
                    BLOCK_M=bt, BLOCK_N=bv, BLOCK_K=bk, GROUP_M=cfg["GROUP"], DOT_PRECISION=precision,
                    num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if acc_hidden is not None:
        grad_hidden.copy_(acc_hidden)
    return grad_hidden, grad_weight


class _LinearTokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, tokens, temperature, return_entropy, ignore_index, config,
                backward_config, chunk_bytes, fp32_precision, softcap):
        logprob, entropy, stats = _linear_forward(hidden, weight, tokens, temperature, return_entropy,
                                                  ignore_index, config, fp32_precision, softcap)
        ctx.save_for_backward(hidden, weight, tokens, stats, entropy)
        ctx.temperature, ctx.ignore_index, ctx.fp32_precision = temperature, ignore_index, fp32_precision
        ctx.softcap = softcap
        ctx.backward_config, ctx.chunk_bytes = backward_config, chunk_bytes
        ctx.set_materialize_grads(False)
        if not return_entropy:
            ctx.mark_non_differentiable(entropy)
        return logprob, entropy

    @staticmethod
    def backward(ctx, g_lp, g_ent):
        hidden, weight, tokens, stats, entropy = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if (g_lp is None and g_ent is None) or not (need_hidden or need_weight):
            return (None,) * 11
        grad_hidden, grad_weight = _linear_backward(
            hidden, weight, tokens, stats, entropy, g_lp, g_ent, ctx.temperature, ctx.ignore_index,
            need_hidden, need_weight, ctx.backward_config, ctx.chunk_bytes, ctx.fp32_precision, ctx.softcap)
        return (grad_hidden, grad_weight) + (None,) * 9


def linear_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor,
                          temperature: float = 1.0, return_entropy: bool = False, ignore_index: int = -100,
                          *, config: dict | None = None, backward_config: dict | None = None,
                          chunk_bytes: int | None = None, check_tokens: bool = True,
                          fp32_precision: str = "tf32", softcap: float | None = None):
    """Log-probabilities (and entropies) of ``tokens`` under ``softmax(hidden @ weight.T / T)``
    without materialising the [T, V] logits.

    Args:
        hidden: [T, H] bf16, fp16 or fp32, stride 1 along H.
        weight: [V, H] LM-head weight, same dtype and device, stride 1 along H.
        tokens, temperature, return_entropy, ignore_index, check_tokens: as ``token_logprobs``.
        config: forward launch config ``{"BLOCK_T", "BLOCK_V", "BLOCK_K", "NSPLIT", "num_warps",
            "num_stages"}``; None picks the tuned or default one (by V, H and dtype, never T).
        backward_config: ``{"BLOCK_T", "BLOCK_V", "BLOCK_K", "GROUP", "num_warps", "num_stages"}``.
        chunk_bytes: the backward's largest d(logits) buffer (default 512 MiB): the vocabulary is
            processed in chunks of ``chunk_bytes / (T * itemsize)`` columns.
        fp32_precision: fp32 inputs only: "tf32" (default: tensor cores, inputs rounded to 10
            mantissa bits) or "ieee" (exact fp32 products on the FP32 pipe, ~8-15x slower).
        softcap: as ``token_logprobs`` (the name Liger's fused linear cross-entropy gives it): each
            logit ``hidden @ weight.T`` becomes ``softcap * tanh(logit / softcap)`` before the
            temperature (Gemma 2: 30); None, the default, compiles the kernels without it.

    Forward: one matmul with an online log-sum-exp epilogue, fp32 accumulation; memory beyond the
    outputs is 16 bytes per token and split. Backward: recomputes the logits tile by tile and
    returns gradients for ``hidden`` and ``weight`` (3 matmuls' worth of FLOPs).
    """
    _check_matrix(hidden, "hidden", "[tokens, hidden_size]")
    _check_matrix(weight, "weight", "[vocab, hidden_size]")
    _check_device(hidden, "hidden")
    if weight.device != hidden.device:
        raise ValueError(f"weight is on {weight.device} but hidden is on {hidden.device}")
    if weight.dtype != hidden.dtype:
        raise ValueError(f"weight dtype {weight.dtype} does not match hidden dtype {hidden.dtype}")
    if weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"weight must be [vocab, {hidden.shape[1]}] to match hidden [tokens, "
                         f"{hidden.shape[1]}], got {tuple(weight.shape)}")
    if weight.shape[0] == 0 or hidden.shape[1] == 0:
        raise ValueError(f"weight must have at least one row and column, got shape {tuple(weight.shape)}")
    _check_tokens(tokens, hidden.shape[0], hidden, "hidden")
    temperature, ignore_index = _check_scalars(temperature, ignore_index)
    softcap = _check_softcap(softcap)
    if chunk_bytes is None:
        chunk_bytes = _DEFAULT_CHUNK_BYTES
    elif isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    if fp32_precision not in FP32_PRECISIONS:
        raise ValueError(f"fp32_precision must be one of {FP32_PRECISIONS}, got {fp32_precision!r}")
    if check_tokens:
        _check_token_range(tokens, weight.shape[0], ignore_index)
    tokens = tokens.contiguous()
    logprob, entropy = _LinearTokenLogprobs.apply(hidden, weight, tokens, temperature, bool(return_entropy),
                                                  ignore_index, config, backward_config, chunk_bytes,
                                                  fp32_precision, softcap)
    return (logprob, entropy) if return_entropy else logprob
