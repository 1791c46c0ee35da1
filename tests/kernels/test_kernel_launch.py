"""No silent fallbacks: one reading of TRITON_INTERPRET for every family (Triton's own), CPU tensors
refused outside the interpreter, and our Triton kernels (not a torch path) produce the results."""

from __future__ import annotations

import pytest
import torch
from _footprint import watch_kernels

from polytrace_kernels._interpreter import interpreting
from polytrace_kernels.attention import decode_attention, varlen_attention
from polytrace_kernels.logprob import linear_token_logprobs, token_logprobs
from polytrace_kernels.packing import pack, unpack

GEN = torch.Generator().manual_seed(0)
LOGITS = torch.randn(4, 40, generator=GEN)
TOKENS = torch.tensor([1, 5, 39, 0])
HIDDEN = torch.randn(4, 16, generator=GEN)
WEIGHT = torch.randn(40, 16, generator=GEN)
Q = torch.randn(9, 2, 16, generator=GEN).half()
CU = torch.tensor([0, 4, 9], dtype=torch.int32)
DQ = torch.randn(2, 2, 16, generator=GEN).half()
DK = torch.randn(2, 8, 1, 16, generator=GEN).half()
LENS = torch.tensor([8, 3], dtype=torch.int32)
PADDED = torch.randn(2, 5, 3, generator=GEN)
PADDED_LENS = torch.tensor([5, 2])

CALLS = {
    "token_logprobs": (lambda: token_logprobs(LOGITS, TOKENS), "logits"),
    "linear_token_logprobs": (lambda: linear_token_logprobs(HIDDEN, WEIGHT, TOKENS), "hidden"),
    "varlen_attention": (lambda: varlen_attention(Q, Q, Q, CU, CU), "q"),
    "decode_attention": (lambda: decode_attention(DQ, DK, DK, LENS), "q"),
    "pack": (lambda: pack(PADDED, PADDED_LENS), "padded"),
    "unpack": (lambda: unpack(PADDED.reshape(10, 3)[:7], torch.tensor([0, 5, 7]), 5), "packed"),
}
KERNELS = {
    "token_logprobs": ["token_logprobs_fwd_kernel_generic"],
    "linear_token_logprobs": ["linear_logprobs_fwd_kernel", "linear_logprobs_combine_kernel"],
    "varlen_attention": ["varlen_fwd_kernel"],
    "decode_attention": ["decode_split_kernel"],
    "pack": ["_pack_kernel"],
    "unpack": ["_unpack_kernel"],
}


@pytest.mark.parametrize("value,expected", [
    ("1", True), ("true", True), ("TRUE", True), ("on", True), ("Yes", True), ("y", True),
    ("0", False), ("false", False), ("off", False), ("", False), (" 1", False), ("2", False), ("interpret", False),
])
def test_interpreting_reads_the_variable_as_triton_does(monkeypatch, value, expected):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert interpreting() is expected
    try:  # Triton's own reading (C++, behind triton.knobs), where this triton exposes it
        from triton._C.libtriton import getenv_bool
    except ImportError:
        return
    assert getenv_bool("TRITON_INTERPRET", False) is expected


@pytest.mark.parametrize("setting", ["0", "false", "off", "", " 1"])
@pytest.mark.parametrize("call", list(CALLS))
def test_cpu_tensors_outside_the_interpreter_are_refused(monkeypatch, call, setting):
    """Every family, every setting Triton reads as "off" (the old packing code ran a torch copy of
    the reference whenever the value was not exactly "1"; two families took "false" as on)."""
    if torch.cuda.is_available():
        pytest.skip("the refusal is for CPU tensors on a machine where the kernels are compiled")
    monkeypatch.setenv("TRITON_INTERPRET", setting)
    fn, argname = CALLS[call]
    with pytest.raises(ValueError) as info:
        fn()
    msg = str(info.value)
    assert msg.startswith(f"{argname} is on cpu") and "TRITON_INTERPRET" in msg, msg


@pytest.mark.parametrize("call", list(CALLS))
def test_results_come_from_our_triton_kernels(call):
    with watch_kernels() as rec:
        out = CALLS[call][0]()
    rec.assert_launched(*KERNELS[call])
    assert out is not None


def test_autograd_paths_launch_the_backward_kernels():
    with watch_kernels() as rec:
        x = LOGITS.clone().requires_grad_()
        token_logprobs(x, TOKENS).sum().backward()
        h, w = HIDDEN.clone().requires_grad_(), WEIGHT.clone().requires_grad_()
        linear_token_logprobs(h, w, TOKENS).sum().backward()
        q = Q.clone().requires_grad_()
        varlen_attention(q, Q, Q, CU, CU).float().sum().backward()
        p = PADDED.clone().requires_grad_()
        pack(p, PADDED_LENS)[0].sum().backward()
    rec.assert_launched("token_logprobs_bwd_kernel", "linear_dlogits_kernel", "bwd_preprocess_kernel",
                        "varlen_bwd_dkdv_kernel", "varlen_bwd_dq_kernel", "_unpack_kernel")


@pytest.mark.parametrize("setting", ["true", "On"])
@pytest.mark.parametrize("call", list(CALLS))
def test_any_setting_triton_reads_as_on_runs_our_kernels(monkeypatch, call, setting):
    """The old packing code fell back to torch unless the value was exactly "1"."""
    with watch_kernels() as rec:
        monkeypatch.setenv("TRITON_INTERPRET", setting)
        CALLS[call][0]()
    rec.assert_launched(*KERNELS[call])
