"""Bad and unusual input to the log-prob kernels' public APIs (tiny shapes, CPU interpreter).

Every case either matches the pure-torch reference or raises a ValueError whose message names the
offending argument: never a silent wrong answer, never an IndexError or a Triton error for a user
mistake; a non-finite row gives NaN, never a plausible number. The other kernel families' cases are
in the sibling ``test_kernel_bad_input_*.py`` files, the helpers they share in ``_bad_input.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _bad_input import _close, _gen, _raises, no_interpreter  # noqa: F401  (no_interpreter: a fixture, used by name)

from polytrace_kernels.logprob import linear_token_logprobs, token_logprobs
from polytrace_kernels.logprob.reference import linear_token_logprobs_reference, token_logprobs_reference

T, V, H = 5, 40, 24


LOGITS = torch.randn(T, V, generator=_gen(0))
TOKENS = torch.randint(0, V, (T,), generator=_gen(1))
HIDDEN = torch.randn(T, H, generator=_gen(2))
WEIGHT = torch.randn(V, H, generator=_gen(3)) * 0.3


# ---------------------------------------------------------------------------------------------
# logprob
# ---------------------------------------------------------------------------------------------

LOGPROB_ERRORS = {
    "tokens-shape": (lambda: token_logprobs(LOGITS, TOKENS[:3]), "tokens"),
    "tokens-float": (lambda: token_logprobs(LOGITS, TOKENS.float()), "tokens"),
    "tokens-out-of-range": (lambda: token_logprobs(LOGITS, torch.tensor([0, 1, V, 2, 3])), "tokens"),
    "tokens-negative": (lambda: token_logprobs(LOGITS, torch.tensor([0, 1, -1, 2, 3])), "tokens"),
    "tokens-huge-int64": (lambda: token_logprobs(LOGITS, torch.tensor([0, 1, 2**40, 2, 3])), "tokens"),
    "tokens-meta": (lambda: token_logprobs(LOGITS, TOKENS.to("meta")), "tokens"),
    "logits-fp64": (lambda: token_logprobs(LOGITS.double(), TOKENS), "logits"),
    "logits-3d": (lambda: token_logprobs(LOGITS[None], TOKENS), "logits"),
    "logits-list": (lambda: token_logprobs(LOGITS.tolist(), TOKENS), "logits"),
    "logits-transposed": (lambda: token_logprobs(torch.randn(V, T).t(), TOKENS), "logits"),
    "logits-V0": (lambda: token_logprobs(torch.randn(T, 0), TOKENS), "logits"),
    "logits-meta": (lambda: token_logprobs(LOGITS.to("meta"), TOKENS.to("meta")), "logits"),
    "temperature-0": (lambda: token_logprobs(LOGITS, TOKENS, 0.0), "temperature"),
    "temperature-negative": (lambda: token_logprobs(LOGITS, TOKENS, -1.0), "temperature"),
    "temperature-nan": (lambda: token_logprobs(LOGITS, TOKENS, float("nan")), "temperature"),
    "temperature-inf": (lambda: token_logprobs(LOGITS, TOKENS, float("inf")), "temperature"),
    "temperature-tensor": (lambda: token_logprobs(LOGITS, TOKENS, torch.tensor(0.7)), "temperature"),
    "ignore_index-float": (lambda: token_logprobs(LOGITS, TOKENS, ignore_index=-100.0), "ignore_index"),
    "config-key": (lambda: token_logprobs(LOGITS, TOKENS, config={"BLOCKV": 16}), "config"),
    "linear-H-mismatch": (lambda: linear_token_logprobs(HIDDEN, WEIGHT[:, :8], TOKENS), "weight"),
    "linear-dtype-mismatch": (lambda: linear_token_logprobs(HIDDEN, WEIGHT.half(), TOKENS), "weight"),
    "linear-weight-transposed": (lambda: linear_token_logprobs(HIDDEN, torch.randn(H, V).t(), TOKENS), "weight"),
    "linear-weight-meta": (lambda: linear_token_logprobs(HIDDEN, WEIGHT.to("meta"), TOKENS), "weight"),
    "linear-tokens-out-of-range": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS + V), "tokens"),
    "linear-temperature-nan": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS, float("nan")),
                               "temperature"),
    "linear-chunk_bytes-0": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS, chunk_bytes=0), "chunk_bytes"),
    "linear-fp32_precision": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS, fp32_precision="fp64"),
                              "fp32_precision"),
}


@pytest.mark.parametrize("case", sorted(LOGPROB_ERRORS))
def test_logprob_bad_input_names_the_argument(case):
    _raises(*LOGPROB_ERRORS[case])


@pytest.mark.usefixtures("no_interpreter")
def test_logprob_cpu_outside_interpreter_is_refused():
    _raises(lambda: token_logprobs(LOGITS, TOKENS), "logits")
    _raises(lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS), "hidden")


def _strided_views():
    big = torch.randn(T, V + 24, generator=_gen(4))
    odd = torch.randn(T, V + 1, generator=_gen(5))
    return {
        "row-stride-gt-V": big[:, :V],                # a padded-vocabulary slice
        "misaligned-offset": odd[:, 1:],              # data pointer not 16-byte aligned
        "int32-tokens": LOGITS,
    }


@pytest.mark.parametrize("view", ["row-stride-gt-V", "misaligned-offset", "int32-tokens"])
def test_logprob_strided_views_match_reference(view):
    x = _strided_views()[view]
    tokens = TOKENS.int() if view == "int32-tokens" else TOKENS[:1].expand(T)  # stride-0 tokens
    lp, ent = token_logprobs(x, tokens, temperature=0.7, return_entropy=True)
    rlp, rent = token_logprobs_reference(x, tokens, 0.7, return_entropy=True, compute_dtype=torch.float64)
    _close(lp, rlp, 1e-5)
    _close(ent, rent, 1e-5)


def test_logprob_numpy_scalars_are_accepted():
    tokens = TOKENS.clone()
    tokens[1] = 0
    out = token_logprobs(LOGITS, tokens, temperature=np.float32(0.5), ignore_index=np.int64(0))
    _close(out, token_logprobs_reference(LOGITS, tokens, 0.5, ignore_index=0, compute_dtype=torch.float64), 1e-5)
    assert out[1] == 0.0


# the interpreter's numpy warns on the deliberately non-finite arithmetic these tests feed it
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("poison", ["nan", "+inf", "all-neg-inf"])
def test_logprob_non_finite_row_gives_nan_not_a_plausible_number(poison):
    # tl.minimum(NaN, 0) is 0: a NaN row used to come back as log-prob 0 (probability 1)
    x = LOGITS.clone()
    if poison == "nan":
        x[2, 3] = float("nan")
    elif poison == "+inf":
        x[2, 3] = float("inf")
    else:
        x[2] = float("-inf")
    ref = token_logprobs_reference(x, TOKENS, compute_dtype=torch.float64)
    assert torch.isnan(ref[2])
    _close(token_logprobs(x, TOKENS), ref, 1e-5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_linear_logprob_nan_hidden_row_gives_nan():
    h = HIDDEN.clone()
    h[2, 0] = float("nan")
    lp = linear_token_logprobs(h, WEIGHT, TOKENS)
    assert torch.isnan(lp[2]) and not torch.isnan(lp[[0, 1, 3, 4]]).any()


def test_logprob_masked_vocabulary_forward_and_gradient():
    # -inf logits (a masked vocabulary) are finite everywhere else, with a zero gradient there
    x = LOGITS.clone()
    x[:, 30:] = float("-inf")
    tokens = TOKENS % 30
    xg = x.clone().requires_grad_()
    lp, ent = token_logprobs(xg, tokens, return_entropy=True)
    (lp + 0.5 * ent).sum().backward()
    rlp, rent = token_logprobs_reference(x, tokens, return_entropy=True, compute_dtype=torch.float64)
    _close(lp, rlp, 1e-5)
    _close(ent, rent, 1e-5)
    # d(logprob)/dx = onehot - p; d(entropy)/dx = -p (log p + H)
    logp = torch.log_softmax(x.double()[:, :30], -1)
    p = logp.exp()
    onehot = torch.nn.functional.one_hot(tokens, 30).double()
    expected = (onehot - p) + 0.5 * (-p * (logp + rent[:, None]))
    _close(xg.grad[:, :30], expected, 1e-5)
    assert torch.all(xg.grad[:, 30:] == 0)


@pytest.mark.parametrize("need", ["hidden", "weight", "both", "none"])
def test_linear_logprob_requires_grad_combinations(need):
    tokens = TOKENS.clone()
    tokens[1] = -100
    h = HIDDEN.clone().requires_grad_(need in ("hidden", "both"))
    w = WEIGHT.clone().requires_grad_(need in ("weight", "both"))
    h64 = HIDDEN.double().requires_grad_(h.requires_grad)
    w64 = WEIGHT.double().requires_grad_(w.requires_grad)
    lp, ent = linear_token_logprobs(h, w, tokens, 0.8, True, fp32_precision="ieee")  # held to 1e-4
    rlp, rent = linear_token_logprobs_reference(h64, w64, tokens, 0.8, True, compute_dtype=torch.float64)
    _close(lp, rlp.detach(), 1e-4)
    if need == "none":
        assert not lp.requires_grad
        return
    (lp + 0.5 * ent).sum().backward()
    (rlp + 0.5 * rent).sum().backward()
    if h.requires_grad:
        _close(h.grad, h64.grad, 1e-4)
    if w.requires_grad:
        _close(w.grad, w64.grad, 1e-4)


def test_logprob_zero_tokens_forward_and_backward():
    x = torch.randn(0, V, requires_grad=True)
    lp, ent = token_logprobs(x, TOKENS[:0], return_entropy=True)
    (lp.sum() + ent.sum()).backward()
    assert lp.shape == (0,) and x.grad.shape == (0, V)
    h = torch.randn(0, H, requires_grad=True)
    w = WEIGHT.clone().requires_grad_()
    linear_token_logprobs(h, w, TOKENS[:0]).sum().backward()
    assert h.grad.shape == (0, H) and torch.all(w.grad == 0)
