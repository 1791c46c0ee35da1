"""Under LoRA the reference log-prob is the actor's own forward with its adapters switched off,
so with ``param_offload`` it pays the actor's load-and-offload like ``old_log_prob`` does.

verl 38d9a88 (2025-06-14, the date of the 14B/72B GRPO-LoRA ladder runs), fsdp_workers.py
lines 665-715: ``compute_ref_log_prob`` under ``_is_lora`` calls ``compute_log_prob``, which runs
``load_fsdp_model_to_gpu`` before and ``offload_fsdp_model_to_cpu`` after the forward. The step
model prices that traffic on ``old_log_prob`` only (stages.offload_parts), and the offload price
was fitted with ``ref`` lacking it: on the 72B ladder run (steps 20-39, H100/H200 by MFU) zero-shot
gives old_log_prob 1.76x and ref 0.61x while the two measured stages are 9.8 s and 8.5 s. Adding
the part without refitting the offload price puts ref at ~2x on the 7B-72B rungs, so the
structure waits for the priors' refit (issue 36); this test flips to a failure when it lands.

Tried with the refit (CPU, scripts/fit_priors.py at 6868e1a plus the part, 2 min 16 s; not kept):
the offload slowdown 3.33 -> 2.23, but one size held out 9.5% -> 10.5% (past the task's +0.5-point bar),
generation held out by log 16.6% -> 18.9%, the published rows within 30% 21 -> 18 of 29 (asserted:
8 of 11 held); the ladder (median 8.0% -> 7.5%, range 34 -> 34 of 40), same-run (15 of 22), GPU
(13.4% -> 12.0%), backend (34.4% -> 33.1%), LOLO (10.7% -> 10.5%) and the kept-aside 14B / 72B
rungs (zero-shot 0.92x / 0.95x -> 0.92x / 0.93x, same-run 95.0% / 94.7% -> 95.0% / 94.6%) held.
Leave-one-log-out, the ladder's ref went from 0.66-0.95x to 1.07-1.80x (old_log_prob 0.45-1.56x
-> 0.38-1.21x): one price cannot fit both, because on every rung the measured ref is 0.9-1.6 s
below old_log_prob (0.5B 0.61 vs 1.73 s, 3B 1.41 vs 2.81 s, 32B 3.80 vs 5.43 s; 72B 8.5 vs 9.8 s)
whatever the model's size, while the fp32 shards' PCIe round trip grows from 0.1 s (0.5B on 2
GPUs) to 1.6 s (32B on 8). The ref's own excess over its forward (32B: 1.3 s) is about that round
trip at the link's price; what old_log_prob pays on top looks like a per-call cost of its own, not
traffic, which the offload slowdown absorbs today (uncited, so not priced)."""

from __future__ import annotations

import pytest

from polytrace.run.models import get_model
from polytrace.stepmodel import estimate


@pytest.mark.xfail(strict=True, reason="ref under LoRA lacks the actor's param offload; refit with it, "
                                       "one size held out 9.5% -> 10.5%: old_log_prob's per-call excess "
                                       "over ref (0.9-1.6 s on every rung) unpriced (docstring)")
def test_lora_reference_pays_the_actors_offload():
    run = estimate("dapo-math-32b", "qwen2.5-32b", "h100", 8, lora_rank=32, param_offload=True)
    k = run.summary["kernels"]
    p = get_model("qwen2.5-32b").params_total
    move = 2 * 4.0 * p / 8 / 20e9  # the fp32 shards to the GPU and back at the PCIe price
    assert k["old_log_prob"]["offload"]["s"] == pytest.approx(move, rel=1e-9)  # priced today
    assert k["ref"].get("offload", {}).get("s", 0.0) == pytest.approx(move, rel=1e-9)


def test_without_lora_the_reference_is_its_own_model():
    """No LoRA: the reference is a separate module with its own offload switch; the actor's
    param_offload alone leaves the reference pass without actor traffic."""
    run = estimate("dapo-math-32b", "qwen2.5-32b", "h100", 8, param_offload=True)
    k = run.summary["kernels"]
    p = get_model("qwen2.5-32b").params_total
    move = 2 * 4.0 * p / 8 / 20e9
    assert k["old_log_prob"]["offload"]["s"] == pytest.approx(move, rel=1e-9)
    assert k["ref"].get("offload", {}).get("s", 0.0) == 0.0
