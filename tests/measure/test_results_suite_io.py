"""What the suites write (suites/harness.py + suites/conftest.py) is what polytrace.measure.results reads:
a toy suite run through pytest-benchmark, then read, shown and gated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _results_synth import cli_main

from polytrace.measure.results import GatePolicy, compare, format_show, load_result

ROOT = Path(__file__).resolve().parents[2]

TOY_SUITE = '''
import pytest
from suites.harness import Case, Provider, run, skip_unavailable

PROVIDERS = [Provider("toy_ours", kind="ours"), Provider("toy_torch", kind="baseline"),
             Provider("toy_peer", available=lambda: "not installed")]


@pytest.mark.parametrize("n", [64, 256])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_toy(benchmark, provider, n):
    skip_unavailable(provider)
    case = Case(family="packing", kernel="toy_sum", provider=provider.name, mode="fwd", shape={"n": n},
                flops=float(n), bytes_moved=8.0 * n, profile="deepcoder-14b", seed=3, step=0, weight=n / 320)
    run(benchmark, lambda: sum(range(n)), case, rounds=6)
'''


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("suite")
    (tmp / "test_toysuite.py").write_text(TOY_SUITE)
    out = tmp / "toy.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    env.pop("POLYTRACE_BENCH_BUDGET_S", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suites.conftest", "-p", "no:cacheprovider",
                           str(tmp / "test_toysuite.py"), f"--benchmark-json={out}", "--benchmark-save-data",
                           "--rootdir", str(tmp)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_suite_json_carries_what_the_gate_needs(toy_run):
    raw = json.loads(toy_run.read_text())
    info = raw["machine_info"]["polytrace"]
    assert info["measured_on"] == "cpu-interpreter" and info["gpu_slug"] == "cpu"
    assert {"torch_version", "triton_version", "commit", "suite_hash"} <= set(info)
    assert set(info["kernel_hashes"]) >= {"packing"} and all(info["kernel_hashes"].values())
    r = load_result(toy_run)
    assert len(r.benchmarks) == 4  # the unavailable peer is skipped
    b = r.by_id()["packing/toy_sum/toy_ours/fwd/n=64"]
    assert b.provider_kind == "ours" and r.by_id()["packing/toy_sum/toy_torch/fwd/n=64"].provider_kind == "baseline"
    assert b.rounds.size == 6 and b.seed == 3 and b.weight == pytest.approx(0.2)
    assert b.kernel_hash == info["kernel_hashes"]["packing"] and r.suite == "toysuite"
    assert "not performance figures" in format_show(r)


def test_gate_on_suite_output(toy_run, capsys):
    r = load_result(toy_run)
    report = compare(r, r)
    assert report.exit_code == 2  # CPU-interpreter timings are refused ...
    forced = compare(r, r, policy=GatePolicy(force=True))
    # 6 CPU rounds a side: unchanged where the spread is small enough to bound, inconclusive elsewhere
    assert forced.exit_code in (0, 3) and all(c.status in ("unchanged", "inconclusive") for c in forced.comparisons)
    assert cli_main(["gate", str(toy_run), str(toy_run), "--force"]) == forced.exit_code
    capsys.readouterr()


def test_time_budget_skips_remaining_benchmarks(monkeypatch):
    import suites.conftest as sc

    monkeypatch.setenv("POLYTRACE_BENCH_BUDGET_S", "30")
    monkeypatch.setattr(sc, "_session_start", time.monotonic())
    sc.pytest_runtest_setup(None)  # within the budget: runs
    monkeypatch.setattr(sc, "_session_start", time.monotonic() - 31)
    with pytest.raises(pytest.skip.Exception, match="POLYTRACE_BENCH_BUDGET_S=30 s spent"):
        sc.pytest_runtest_setup(None)
    monkeypatch.setenv("POLYTRACE_BENCH_BUDGET_S", "soon")
    with pytest.raises(ValueError, match="POLYTRACE_BENCH_BUDGET_S"):
        sc.pytest_runtest_setup(None)
