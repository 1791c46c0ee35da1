"""``validate`` on a GPU off the corpus (issue 36 item 5 and its "Bad input"): the priors come from
published benchmarks and every output says so; a log whose MFU contradicts the GPU given is priced
on the GPU given with a note naming both, never a silent choice."""

from __future__ import annotations

from polytrace.calibrate.logconfig import Overrides
from polytrace.calibrate.validate import prepare
from polytrace.calibrate.zeroshot import zero_shot
from polytrace.run.hardware import get_gpu
from polytrace.stepmodel import devices

LOG = "verl_qwen2-7b_ppo_8gpu_b1024x5.log"  # play-verl: 8 H100s, its MFU reads verl's 989 TFLOP/s class


def test_an_h100_log_given_as_mi300x_is_priced_as_given_with_both_notes(validation_logs):
    _log, run, notes, _rows, _split = prepare(validation_logs / LOG, Overrides(gpu="mi300x"))
    assert run.gpu.slug == "mi300x"  # the GPU given is priced, never silently switched
    check = [n for n in notes if n.startswith("GPU check:")]
    assert len(check) == 1 and "mi300x" in check[0] and "989 TFLOP/s class" in check[0]
    assert notes.count(devices.note(get_gpu("mi300x"))) == 1


def test_the_same_log_on_its_own_gpu_has_neither_note(validation_logs):
    _log, run, notes, _rows, _split = prepare(validation_logs / LOG, Overrides(gpu="h100-sxm"))
    assert not any(n.startswith("GPU check:") or "efficiency priors" in n for n in notes)


def test_zero_shot_on_mi300x_prices_the_update_slower_by_the_gemm_ratio(validation_logs, monkeypatch):
    """The update's priced work is GEMM-bound trainer work (slowed by 1/0.636) plus host work and
    constants (not slowed): its prediction grows, by less than 1/0.636; the note is in the JSON."""
    res = zero_shot(validation_logs / LOG, Overrides(gpu="mi300x"))
    assert devices.note(get_gpu("mi300x")) in res.to_json()["notes"]
    monkeypatch.setattr(devices, "PUBLISHED", {})
    nvidia = zero_shot(validation_logs / LOG, Overrides(gpu="mi300x"))
    grew = (res.accuracy["update_actor"]["mean_predicted_s"] / nvidia.accuracy["update_actor"]["mean_predicted_s"])
    assert 1.2 < grew < 1.0 / ((668.4 / 1307.4) / (794.5 / 989.0))
    # the base roofline (the naive predictor beside the priors) is the device's datasheet roofline: unmoved
    assert res.accuracy["update_actor"]["roofline_mean_predicted_s"] == nvidia.accuracy["update_actor"][
        "roofline_mean_predicted_s"]
