"""Triton pack/unpack against torch boolean-mask indexing (interpreter on CPU), autograd, errors."""

from __future__ import annotations

import pytest
import torch

from polytrace_kernels.packing import pack, unpack
from polytrace_kernels.packing.reference import pack_reference, unpack_reference

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _mask(lengths, S, ndim):
    m = torch.arange(S, device=lengths.device)[None, :] < lengths[:, None]
    return m.reshape(m.shape + (1,) * (ndim - 2))


@pytest.mark.parametrize("shape", [(4, 9), (3, 7, 5), (2, 6, 3, 4), (5, 33, 130)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_pack_unpack_match_torch_indexing(shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(*shape, generator=g) * 100).to(dtype).to(DEVICE)
    lengths = torch.randint(0, shape[1] + 1, (shape[0],), generator=g).to(DEVICE)
    lengths[0] = shape[1]  # one full-length row
    packed, cu, max_seqlen = pack(x, lengths)
    ref, cu_ref, max_ref = pack_reference(x, lengths)
    assert torch.equal(packed, ref) and torch.equal(cu, cu_ref) and max_seqlen == max_ref
    assert cu.dtype == torch.int32
    for max_len in (shape[1], max_seqlen + 2):
        assert torch.equal(unpack(packed, cu, max_len), unpack_reference(ref, cu_ref, max_len))


def test_known_sizes_skip_the_host_sync_and_give_the_same_result():
    x = torch.randn(3, 8, 4, device=DEVICE)
    lengths = torch.tensor([8, 0, 5], device=DEVICE)
    packed, cu, m = pack(x, lengths, total_tokens=13, max_seqlen=8)
    ref, _, _ = pack_reference(x, lengths)
    assert torch.equal(packed, ref) and m == 8 and cu.tolist() == [0, 8, 8, 13]


def test_unpack_cuts_rows_past_max_len():
    packed = torch.arange(10.0, device=DEVICE).reshape(5, 2)
    cu = torch.tensor([0, 3, 5], dtype=torch.int32, device=DEVICE)
    out = unpack(packed, cu, 2)
    assert out.tolist() == [[[0, 1], [2, 3]], [[6, 7], [8, 9]]]


def test_autograd_through_pack_and_unpack():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 10, 3, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_()
    lengths = torch.tensor([10, 3, 0, 7], device=DEVICE)
    packed, cu, _ = pack(x, lengths)
    w = torch.randn(packed.shape, generator=g, dtype=torch.float64).to(DEVICE)
    (packed * w).sum().backward()
    expected = unpack_reference(w, cu, 10)
    assert torch.equal(x.grad, expected)
    # unpack's backward = pack of the gradient (rows past a length get no gradient)
    p = packed.detach().clone().requires_grad_()
    out = unpack(p, cu, 12)
    go = torch.randn(out.shape, generator=g, dtype=torch.float64).to(DEVICE)
    (out * go).sum().backward()
    assert torch.equal(p.grad, pack_reference(go, lengths)[0])
    assert torch.equal(out.detach() * _mask(lengths, 12, 3), out.detach())


def test_gradcheck_round_trip():
    x = torch.randn(2, 4, 2, dtype=torch.float64, device=DEVICE, requires_grad=True)
    lengths = torch.tensor([3, 1], device=DEVICE)

    def f(inp):
        p, cu, m = pack(inp, lengths)
        return unpack(p * 2.0, cu, 4)

    assert torch.autograd.gradcheck(f, (x,))


@pytest.mark.parametrize("call, match", [
    (lambda: pack(torch.zeros(3), torch.tensor([1, 1, 1])), "padded must be"),
    (lambda: pack(torch.zeros(2, 4), torch.tensor([1])), "lengths must be a 1-D tensor of 2"),
    (lambda: pack(torch.zeros(2, 4), torch.tensor([1.0, 2.0])), "lengths must hold integers"),
    (lambda: pack(torch.zeros(2, 4), torch.tensor([5, 1])), r"lengths must lie in \[0, 4\]"),
    (lambda: pack(torch.zeros(2, 4), torch.tensor([-1, 1])), "lengths must lie"),
    (lambda: unpack(torch.zeros(3, 2), torch.tensor([0, 3]), -1), "max_len must be"),
    (lambda: unpack(torch.zeros(3, 2), torch.tensor([0.0, 3.0]), 3), "cu_seqlens must hold integers"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pack_and_unpack_backward_take_upstream_gradients_in_any_layout():
    """``packed.sum()`` hands back an expanded gradient (every stride 0); a sliced one skips columns:
    each gives the contiguous copy's gradient."""
    padded = torch.randn(3, 10, 8)
    lengths = torch.tensor([10, 3, 7])
    packed_leaf = padded.clone().requires_grad_()
    packed, cu, _ = pack(packed_leaf, lengths)
    grads = [torch.ones((), dtype=packed.dtype).expand(packed.shape), torch.randn(packed.shape[0], 16)[:, ::2]]
    for g in grads:
        assert not g.is_contiguous()
        (got,) = torch.autograd.grad(packed, packed_leaf, g, retain_graph=True)
        (want,) = torch.autograd.grad(packed, packed_leaf, g.contiguous(), retain_graph=True)
        assert torch.equal(got, want), g.stride()
    flat = torch.randn(20, 8).requires_grad_()
    out = unpack(flat, cu, 10)
    g = torch.randn(3, 10, 16)[:, :, ::2]
    (got,) = torch.autograd.grad(out, flat, g, retain_graph=True)
    (want,) = torch.autograd.grad(out, flat, g.contiguous())
    assert torch.equal(got, want)
