"""Synthetic pytest-benchmark result files for the results, gate, plot and CLI tests
(``tests/measure/test_results_synth.py`` checks the builder writes what the suites write, so the
other tests exercise the real schema), and ``cli_main``, the command line run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SHAPES = [  # (shape_id, weight, base median seconds): a head of common shapes and a long tail
    ("tokens=4096,vocab=32000", 0.40, 2.0e-3),
    ("tokens=8192,vocab=32000", 0.30, 4.0e-3),
    ("tokens=16384,vocab=32000", 0.20, 8.0e-3),
    ("tokens=32768,vocab=32000", 0.08, 16.0e-3),
    ("tokens=65536,vocab=32000", 0.02, 32.0e-3),  # the long tail
]
PROVIDERS = [("triton", "ours"), ("torch", "baseline")]


def bench_entry(shape_id: str, weight: float, rounds: np.ndarray, provider: str = "triton",
                kind: str = "ours", family: str = "logprob", kernel: str = "token_logprobs", mode: str = "fwd",
                kernel_hash: str = "aaaa", profile: str = "dapo-math-32b", seed: int = 0,
                measured_on: str = "cuda", device_name: str = "NVIDIA H200") -> dict:
    tokens = int(shape_id.split(",")[0].split("=")[1])
    shape = dict(kv.split("=") for kv in shape_id.split(","))
    flops, nbytes = 2.0 * tokens * 32000 * 10, 2.0 * tokens * 32000
    median = float(np.median(rounds))
    return {
        "group": f"{family}/{kernel}/{mode}/{shape_id}",
        "name": f"test_{kernel}[{provider}-{shape_id}]",
        "fullname": f"suites/test_{family}.py::test_{kernel}[{provider}-{shape_id}]",
        "params": None, "param": None,
        "extra_info": {
            "family": family, "kernel": kernel, "provider": provider, "provider_kind": kind, "mode": mode,
            "shape": shape, "shape_id": shape_id, "profile": profile, "seed": seed, "step": 0, "weight": weight,
            "flops": flops, "bytes_moved": nbytes, "roofline": "hbm", "kernel_hash": kernel_hash,
            "measured_on": measured_on, "device_name": device_name, "median_s": median,
            "tflops": flops / median / 1e12, "gbps": nbytes / median / 1e9,
            "pct_peak_hbm": 100 * nbytes / median / 4.8e12 if measured_on == "cuda" else None,
        },
        "options": {"timer": "perf_counter"},
        "stats": {"min": float(rounds.min()), "max": float(rounds.max()), "mean": float(rounds.mean()),
                  "median": median, "rounds": int(rounds.size), "iterations": 1, "data": [float(x) for x in rounds]},
    }


def make_result(seed: int = 0, slowdown: dict | None = None, n_rounds: int = 30, noise: float = 0.02,
                gpu: str = "NVIDIA H200", measured_on: str = "cuda", commit: str = "abc123",
                kernel_hash: str = "aaaa", provider_slowdown: dict | None = None, shapes=SHAPES,
                profile_seed: int = 0, datetime: str = "2026-11-02T10:00:00.000000+00:00",
                providers=PROVIDERS, family: str = "logprob") -> dict:
    """A result file: every (shape, provider) timed ``n_rounds`` times with log-normal noise of
    ``noise`` around its base median; ``slowdown`` {shape_id: factor} multiplies our provider's
    times on that shape, ``provider_slowdown`` {provider: factor} all of one provider's times."""
    rng = np.random.default_rng(seed)
    slowdown = slowdown or {}
    provider_slowdown = provider_slowdown or {}
    benches = []
    for provider, kind in providers:
        for shape_id, weight, t in shapes:
            base = t * (1.0 if kind == "ours" else 1.5)
            factor = provider_slowdown.get(provider, 1.0) * (slowdown.get(shape_id, 1.0) if kind == "ours" else 1.0)
            rounds = base * factor * np.exp(rng.normal(0.0, noise, n_rounds))
            benches.append(bench_entry(shape_id, weight, rounds, provider, kind, family=family,
                                       kernel_hash=kernel_hash, seed=profile_seed, measured_on=measured_on,
                                       device_name=gpu))
    slug = "h200" if "H200" in gpu else gpu.lower().replace(" ", "-")
    return {
        "machine_info": {"node": "synthetic", "polytrace": {
            "measured_on": measured_on, "gpu_name": gpu, "gpu_slug": slug if measured_on == "cuda" else "cpu",
            "torch_version": "2.11.0", "triton_version": "3.6.0", "cuda_version": "12.8", "driver_version": "570.1",
            "commit": commit, "kernel_hashes": {family: kernel_hash}, "suite_hash": "ssss"}},
        "commit_info": {"id": commit},
        "benchmarks": benches,
        "datetime": datetime,
        "version": "5.2.3",
    }


def write(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj))
    return path


def cli_main(argv: list[str]) -> int:
    """``polytrace.cli.main`` run in-process: errors as one line, exit 2."""
    from polytrace.cli import main

    return main(argv)
