"""The suites write what the composition layer reads: a result file holding the GPU-sized cases of
every suite (ours and the torch GEMM baseline, timed here at half their roofline instead of on a
GPU) prices the default workload's GEMM, attention, decode, log-prob and packing families as
measured, none at the roofline. A renamed family, kernel, mode, provider or shape key in the suites
would silently send the estimate back to the roofline after the next GPU run; this catches it."""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict

import pytest

CASE_MODULES = ("logprob_cases", "attention_cases", "decode_cases", "packing_cases", "gemm_cases")
MEASURED_FAMILIES = ("gemm", "attention", "decode", "logprob", "packing")


@pytest.fixture
def gpu_cases(monkeypatch):
    mods = [importlib.import_module(f"suites.{name}") for name in CASE_MODULES]
    cached = [getattr(m, f) for m in mods for f in ("logits_shapes", "linear_shapes", "_token_counts",
                                                   "varlen_shapes", "decode_shapes", "gemm_shapes") if hasattr(m, f)]
    for m in mods:
        if hasattr(m, "on_gpu"):
            monkeypatch.setattr(m, "on_gpu", lambda: True)
    for fn in cached:
        fn.cache_clear()
    yield [c for m in mods for c in m.cases()]
    for fn in cached:
        fn.cache_clear()


def test_gpu_run_of_the_suites_prices_every_family_as_measured(gpu_cases, tmp_path):
    from polytrace.run.hardware import get_gpu
    from polytrace.stepmodel import estimate
    from polytrace.stepmodel.breakdown import source_lines

    gpu = get_gpu("h200")
    benches = []
    for c in gpu_cases:
        m = c.meta
        if m.provider not in ("ours", "torch", "torch-eager"):  # torch-eager: the default log-prob provider
            continue
        if m.mode == "plan":
            t = 1e-3
        elif m.roofline == "bf16":
            t = m.flops / (0.5 * gpu.ceiling("bf16"))
        else:
            t = max(m.bytes_moved / (0.5 * gpu.ceiling("hbm")), 1e-6)
        info = asdict(m)
        info.update(info.pop("extra"))
        info.update(shape_id=m.shape_id, provider_kind=m.kind, measured_on="cuda", device_name="NVIDIA H200",
                    median_s=t)
        benches.append({"name": c.test_id, "fullname": f"suites/test_{c.suite}.py::test[{c.test_id}]",
                        "extra_info": info, "stats": {"median": t, "data": [t] * 10, "rounds": 10}})
    path = tmp_path / "h200.json"
    path.write_text(json.dumps({"machine_info": {"polytrace": {"measured_on": "cuda", "gpu_name": "NVIDIA H200",
                                                               "gpu_slug": "h200", "commit": "synthetic"}},
                                "benchmarks": benches, "datetime": "2026-12-01T00:00:00+00:00"}))
    est = estimate("dapo-math-32b", "qwen2.5-32b", "h200", 32, steps=range(1), results=[str(path)])
    lines = {line.split(":")[0]: line for line in source_lines(est.summary)}
    for family in MEASURED_FAMILIES:
        # the packing suite times hidden-wide rows; the trainer packs 1-column id rows ~1,000x
        # smaller: priced from those timings, and labelled extrapolated with the factor
        want = "extrapolated" if family == "packing" else "measured"
        assert lines[family].startswith(f"{family}: {want}"), lines[family]
