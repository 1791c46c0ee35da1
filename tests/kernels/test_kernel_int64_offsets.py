"""Runtime offsets past 2^31 elements, on a CPU in the Triton interpreter (which wraps int32
products as the GPU does): a 3-token decode cache whose three sequences lie 2^31 - 16 elements
apart and log-prob logits whose three rows do, built with ``torch.as_strided`` over one
uninitialised storage (8 GB of address space; only the few pages written are touched, ~0.2 GB
resident).
Each kernel must give bit for bit what it gives on a compact copy of the same values (the logits
kernels' backward too: it reads the far rows again). The
compiled-code check (tests/kernels/test_static_report.py) finds 32-bit stride products in the TTIR; this
runs them. In a subprocess: a wrapped offset reads outside the storage and may crash it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

GAP = 2**31 - 16  # a multiple of 16 (the aligned layouts keep it) just under 2^31: row 2 lies past 2^32

DECODE = f"""
import torch
from polytrace_kernels.attention import decode_attention
gap, L, hkv, hq, d = {GAP}, 3, 1, 2, 16
store = torch.empty(2 * gap + 2 * L * hkv * d + 64, dtype=torch.float16)
shape, strides = (3, L, hkv, d), (gap, hkv * d, d, 1)  # sequence 2 starts past 2^32
k = torch.as_strided(store, shape, strides)
v = torch.as_strided(store, shape, strides, storage_offset=L * hkv * d)
g = torch.Generator().manual_seed(0)
k.copy_(torch.randn(shape, generator=g).half())
v.copy_(torch.randn(shape, generator=g).half())
q = torch.randn(3, hq, d, generator=g).half()
lens = torch.tensor([3, 2, 3], dtype=torch.int32)
far = decode_attention(q, k, v, lens, num_splits=1)
near = decode_attention(q, k.contiguous(), v.contiguous(), lens, num_splits=1)
assert torch.isfinite(near).all() and torch.equal(far, near), (far - near).abs().max()
far2 = decode_attention(q, k, v, lens, num_splits=2)
assert torch.equal(far2, decode_attention(q, k.contiguous(), v.contiguous(), lens, num_splits=2))
print("ok")
"""

LOGPROB = f"""
import torch
from polytrace_kernels.logprob import token_logprobs
gap = {GAP}
for vocab in (32, 37):  # the aligned and the generic kernel
    store = torch.empty(2 * gap + vocab + 64, dtype=torch.bfloat16)
    logits = torch.as_strided(store, (3, vocab), (gap, 1))
    g = torch.Generator().manual_seed(vocab)
    logits.copy_((4 * torch.randn(3, vocab, generator=g)).bfloat16())
    tokens = torch.tensor([1, vocab - 1, 5])
    far_leaf = logits.detach().requires_grad_()  # the same far rows, as a leaf: the backward reads them too
    near_leaf = logits.detach().contiguous().requires_grad_()
    up = torch.randn(2, 3, generator=g)
    far = token_logprobs(far_leaf, tokens, return_entropy=True)
    near = token_logprobs(near_leaf, tokens, return_entropy=True)
    for a, b in zip(far, near):
        assert torch.isfinite(b).all() and torch.equal(a, b), (vocab, a, b)
    for leaf, out in ((far_leaf, far), (near_leaf, near)):
        torch.autograd.backward(list(out), list(up))
    assert torch.isfinite(near_leaf.grad).all() and torch.equal(far_leaf.grad, near_leaf.grad), vocab
    del store, logits, far_leaf
print("ok")
"""


@pytest.mark.parametrize("code", [DECODE, LOGPROB], ids=["decode", "logprob"])
def test_offsets_past_2_31_elements(code):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "can't allocate memory" in proc.stderr.lower():
        pytest.skip("this machine refuses 8 GB of address space for the strided storage")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-3000:])
