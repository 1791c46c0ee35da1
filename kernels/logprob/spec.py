"""FLOPs and bytes moved by the log-prob kernels: pure Python, no torch or triton.

Conventions:

- Logits kernels are memory-bound; %-of-peak refers to HBM bandwidth. Bytes are the minimum
  traffic of an ideal kernel: forward reads the logits once (plus tokens, and writes 4 fp32 numbers
  per row: log-prob, entropy, max, log-sum); backward reads the logits once and writes the
  gradient once (plus the per-row statistics and upstream gradients). Elementwise FLOPs are
  reported for information only (about 6 per logit forward, 7 backward).
- Fused LM-head kernels are compute-bound; %-of-peak refers to dense bf16. FLOPs count the
  matmuls only (2 per multiply-add): forward ``2 T V H``; backward recomputes the logits and runs
  the two gradient matmuls, ``3 x 2 T V H``. Bytes: inputs read once, outputs written once, plus
  (backward) the d(logits) chunk buffer written once and read twice.
- ``eager_logits_peak_bytes``: what the eager ``log_softmax(logits.float())`` path holds at
  once: the logits, their fp32 copy and the fp32 log-probabilities (the memory goal's yardstick).
"""

from __future__ import annotations

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "bfloat16": 2, "float16": 2, "float32": 4}
MODES = ("fwd", "bwd", "fwd+bwd")
_TOKEN_BYTES = 8  # int64 token ids
_FWD_ROW_BYTES = _TOKEN_BYTES + 4 * 4  # tokens in; log-prob, entropy, max, log-sum out (fp32)
_BWD_ROW_BYTES = _TOKEN_BYTES + 5 * 4  # tokens; max, log-sum, entropy and 2 upstream gradients (fp32)


def elem_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}") from None


def _check(tokens, vocab, mode: str, hidden=None) -> None:
    """Sizes given as numbers are checked; arrays of them (the step model asks for every rank at
    once, ``polytrace.stepmodel``) go through the same formulas unchecked."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if _number(tokens) and tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    if _number(vocab) and vocab <= 0:
        raise ValueError(f"vocab must be > 0, got {vocab}")
    if hidden is not None and _number(hidden) and hidden <= 0:
        raise ValueError(f"hidden must be > 0, got {hidden}")


def _number(x) -> bool:
    return isinstance(x, (int, float))


def logits_bytes(tokens: int, vocab: int, dtype: str = "bf16", mode: str = "fwd") -> float:
    """Minimum bytes moved by ``token_logprobs`` over [tokens, vocab] logits."""
    _check(tokens, vocab, mode)
    e = elem_bytes(dtype)
    fwd = 1.0 * tokens * vocab * e + tokens * _FWD_ROW_BYTES
    bwd = 2.0 * tokens * vocab * e + tokens * _BWD_ROW_BYTES
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[mode]


def logits_flops(tokens: int, vocab: int, mode: str = "fwd") -> float:
    """Elementwise FLOPs (information only; these kernels are bandwidth-bound)."""
    _check(tokens, vocab, mode)
    fwd, bwd = 6.0 * tokens * vocab, 7.0 * tokens * vocab
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[mode]


def linear_flops(tokens: int, vocab: int, hidden: int, mode: str = "fwd") -> float:
    """Matmul FLOPs of ``linear_token_logprobs``: 2TVH forward, 3 x 2TVH backward."""
    _check(tokens, vocab, mode, hidden)
    fwd = 2.0 * tokens * vocab * hidden
    return {"fwd": fwd, "bwd": 3.0 * fwd, "fwd+bwd": 4.0 * fwd}[mode]


def linear_bytes(tokens: int, vocab: int, hidden: int, dtype: str = "bf16", mode: str = "fwd") -> float:
    """Minimum bytes moved by ``linear_token_logprobs`` (inputs once, outputs once)."""
    _check(tokens, vocab, mode, hidden)
    e = elem_bytes(dtype)
    inputs = 1.0 * tokens * hidden * e + 1.0 * vocab * hidden * e
    fwd = inputs + tokens * _FWD_ROW_BYTES
    # read hidden, weight, stats; write d(hidden), d(weight); d(logits) written once, read twice
    bwd = 2.0 * inputs + tokens * _BWD_ROW_BYTES + 3.0 * tokens * vocab * e
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[mode]


def matmul_flops(tokens: int, vocab: int, hidden: int, mode: str = "fwd") -> float:
    """The bare ``hidden @ weight.T`` of the same shape (the fused kernel's yardstick): forward one
    matmul, backward two (d(hidden), d(weight))."""
    _check(tokens, vocab, mode, hidden)
    fwd = 2.0 * tokens * vocab * hidden
    return {"fwd": fwd, "bwd": 2.0 * fwd, "fwd+bwd": 3.0 * fwd}[mode]


def matmul_bytes(tokens: int, vocab: int, hidden: int, dtype: str = "bf16", mode: str = "fwd") -> float:
    _check(tokens, vocab, mode, hidden)
    e = elem_bytes(dtype)
    inputs = 1.0 * tokens * hidden * e + 1.0 * vocab * hidden * e
    logits = 1.0 * tokens * vocab * e
    fwd = inputs + logits
    bwd = logits + 2.0 * inputs + inputs  # read d(logits), hidden, weight; write both gradients
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[mode]


def eager_logits_peak_bytes(tokens: int, vocab: int, dtype: str = "bf16") -> float:
    """Bytes the eager path holds at once in the forward: logits, fp32 copy, fp32 log-softmax."""
    _check(tokens, vocab, "fwd")
    return 1.0 * tokens * vocab * (elem_bytes(dtype) + 4 + 4)


def fused_memory_goal_bytes(tokens: int, vocab: int, dtype: str = "bf16") -> float:
    """The fused kernel's memory goal: 1/8 of the eager logits + log_softmax footprint."""
    return eager_logits_peak_bytes(tokens, vocab, dtype) / 8.0
