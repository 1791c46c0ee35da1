"""The GPU ladder at its edge (``calibrate.gpuinfer.slowest_allowed``): a preset is allowed when no
step beats its peak roofline, i.e. every step takes at least its peak-roofline seconds (margin >= 1).
A step 1% faster than an H100's peak roofline rules the H100 out; a step exactly at the H200's
is possible (work at the peak) and the H200 is taken. Driven as tests/calibrate/test_gpuinfer.py
drives it, on one-step prepared tuples at a given margin."""

from __future__ import annotations

from test_gpuinfer import _ladder, _prepared, infer_gpu

from polytrace.calibrate.gpuinfer import ASSUMED_NOTE, INFERRED_NOTE


def test_a_step_one_percent_past_a_presets_peak_rules_it_out_and_one_at_its_peak_does_not():
    tried, prepare_on = _ladder({"h100-sxm": 0.99, "h200": 1.0, "b200": 2.0})
    assumed = _prepared("a100-80g", 0.5, [f"{ASSUMED_NOTE} a100-80g (pass --gpu)"])
    _log, run, notes, _rows, _split = infer_gpu("x.log", None, assumed, prepare_on)
    assert run.gpu.slug == "h200" and tried == ["h100-sxm", "h200"], (run.gpu.slug, tried)
    assert notes[0].startswith(f"{INFERRED_NOTE} h200") and "h100-sxm (0.99x)" in notes[0], notes[0]
