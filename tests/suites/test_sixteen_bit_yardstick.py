"""The 16-bit output rule's yardstick (``suites/checks.verify``): a 16-bit output is held within 2x
torch's own same-dtype error, except torch itself, which is never compared with itself (it would
pass whatever it returned) but held to the a-priori 16-bit model (4 u |truth|); and only a peer's
or baseline's output that misses its rule may be relabelled "16-bit-only", never ours.

Hand-built bf16 cases (u = 2^-8): truths exactly representable in bf16 in [1, 2), where one ulp is
2u, so torch's same-dtype result is exact and the 2x-torch rule's bound is its floor, u max|truth|.
"""

from __future__ import annotations

import torch

from suites import checks

U = 2.0 ** -8


def _truth():
    gen = torch.Generator().manual_seed(0)
    t = (1.0 + torch.rand(64, generator=gen, dtype=torch.float64) * 0.9).to(torch.bfloat16)
    return t.to(torch.float64)  # bf16 values in [1, 1.9]: rounding them to bf16 is exact


def test_torch_compared_with_itself_is_held_to_the_16_bit_model_and_a_5_percent_error_fails():
    truth = _truth()
    off = (truth * 1.05).to(torch.bfloat16)  # 5% = 12.8 u, past the model's 4 u
    graded = checks.verify("y", off, truth, ours=False, torch_same=off, self_same=True)
    assert graded[0].verdict == "fail", graded[0]
    assert "16-bit model" in graded[0].rule and "torch" not in graded[0].rule
    exact = checks.verify("y", truth.to(torch.bfloat16), truth, ours=False, torch_same=truth.to(torch.bfloat16),
                          self_same=True)
    assert exact[0].verdict == "pass"


def test_our_output_one_ulp_off_fails_the_torch_rule_and_is_never_relabelled():
    """One ulp (2u |truth|) off everywhere: past the 2x-torch bound (torch exact, floor u max|truth|
    < 1.9 u) but within the 16-bit model's 4 u |truth|: ours fails; the same output from a peer is
    reported "16-bit-only" (timed, never passed)."""
    truth = _truth()
    same = truth.to(torch.bfloat16)
    up = (truth * (1.0 + 2.0 * U)).to(torch.bfloat16)  # one bf16 ulp up at [1, 2)
    assert torch.all((up.double() - truth) > 0)
    ours = checks.verify("y", up, truth, ours=True, torch_same=same)
    peer = checks.verify("y", up, truth, ours=False, torch_same=same)
    assert ours[0].verdict == "fail", ours[0]
    assert peer[0].verdict == "16-bit-only", peer[0]
