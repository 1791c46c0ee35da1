"""The GPU runbook (scripts/device_check.sh, suites/runbook.py), dry-run on the CPU: it fails loudly
when a kernel test fails, passes when all pass, writes at most 8 files, checks every benchmark's
output, and reports baseline benchmarks missing from a run as a failure unless allowed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from _results_synth import make_result, write

from polytrace.measure.results import load_result
from suites import runbook

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device_check.sh"


def _run(tmp_path: Path, name: str, kernel_test: str, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    tests = tmp_path / f"test_kernel_{name}.py"
    tests.write_text(kernel_test)
    out = tmp_path / f"out_{name}"
    env = {**os.environ, "OUT": str(out), "POLYTRACE_RESULTS_DIR": str(tmp_path / "results")}
    env.pop("POLYTRACE_BENCH_BUDGET_S", None)
    proc = subprocess.run(["bash", str(SCRIPT), "--allow-cpu", "--suites", "packing", "--kernel-tests", str(tests),
                           "-k", "pack-ours-dapo", *extra], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    return proc, out


@pytest.fixture(scope="module")
def ok_run(tmp_path_factory):
    """One passing dry run (a kernel test that passes, its own folder and results store), read by
    three tests: as the run that passes, as the direct run the ``--via-bench`` run must
    match (the kernel-test step writes nothing under $OUT beside the log) and as the run without
    the strict estimate rule. A dry run starts five Pythons (about 10 CPU-s on the 2-core machine);
    running it once instead of twice (the same command with ``--skip-tests`` was the other) saves one."""
    return _run(tmp_path_factory.mktemp("ok"), "ok", "def test_kernel_ok():\n    assert 2 + 2 == 4\n")


def test_runbook_passes_when_everything_passes_and_fails_when_a_kernel_test_fails(tmp_path, ok_run):
    ok, out = ok_run
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    assert "PASSED ==" in ok.stdout and "kernel tests: passed" in ok.stdout
    files = sorted(p.name for p in out.iterdir())
    assert files == ["device_check.log", "packing.json", "summary.txt"] and len(files) <= 8
    benches = json.loads((out / "packing.json").read_text())["benchmarks"]
    assert benches and all(b["extra_info"]["check"]["ok"] is True for b in benches)
    assert all(b["extra_info"]["timing"] and b["extra_info"]["check"]["rule"] == "exact copy" for b in benches)

    bad, _ = _run(tmp_path, "bad", "def test_kernel_bad():\n    assert 2 + 2 == 5, 'planted kernel bug'\n")
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert "FAILED ==" in bad.stdout and "kernel tests: FAILED (rc 1)" in bad.stdout
    assert "planted kernel bug" in bad.stdout or "test_kernel_bad" in bad.stdout


@pytest.mark.parametrize("args, message", [
    (["--budget-s", "soon"], "budgets are whole seconds"),
    (["--suites", "a b c d e f"], "at most 5 suites"),
    (["--frobnicate"], "unknown option --frobnicate"),
])
def test_runbook_refuses_bad_options_with_exit_3(args, message, tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OUT": str(tmp_path / "out")})
    assert proc.returncode == 3 and message in proc.stderr


def _run_dir(tmp_path: Path, drop: int = 0) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True, exist_ok=True)
    obj = make_result()
    obj["benchmarks"] = obj["benchmarks"][drop:]
    write(run / "logprob.json", obj)
    return run


def test_summary_fails_on_baseline_benchmarks_missing_from_the_run(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "baselines").mkdir(parents=True)
    write(results / "baselines" / "h200.json", make_result())
    run = _run_dir(tmp_path, drop=2)
    missing = runbook.missing_benchmarks(load_result(results / "baselines" / "h200.json"),
                                         [load_result(run / "logprob.json")], ["logprob"])
    assert len(missing) == 2
    assert runbook.summary(run, tmp_path / "s.txt", "h200", ["logprob"], results) == 1
    assert "MISSING: 2 benchmark(s) of the baseline" in capsys.readouterr().out
    assert (run / "gate.md").is_file() and "MISSING" in (tmp_path / "s.txt").read_text()
    assert runbook.summary(run, tmp_path / "s.txt", "h200", ["logprob"], results, allow_missing=True) == 0
    # a suite that did not run is not expected
    assert runbook.missing_benchmarks(load_result(results / "baselines" / "h200.json"), [], ["packing"]) == []
    full = _run_dir(tmp_path / "b")
    assert runbook.summary(full, tmp_path / "s2.txt", "h200", ["logprob"], results) == 0
    capsys.readouterr()


def test_store_step_refuses_cpu_results_unless_allowed(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    write(run / "logprob.json", make_result(measured_on="cpu-interpreter", gpu="cpu"))
    assert runbook.store(run, ["logprob"], tmp_path / "results", False, False, False) == 1
    assert "store failed" in capsys.readouterr().out
    assert runbook.store(run, ["logprob"], tmp_path / "results", True, True, False) == 0
    assert (tmp_path / "results" / "baselines" / "cpu.json").is_file()


SKIP_TESTS_KERNEL_TEST = "def test_kernel_ok():\n    assert True\n"


def test_runbook_through_polytrace_bench_writes_the_same_benchmarks(tmp_path, ok_run):
    """--via-bench (issue 14: the runbook through `polytrace bench` on one GPU) gives the same result
    files: the same benchmark ids, each with its output check."""
    kernel_test = SKIP_TESTS_KERNEL_TEST
    direct, out_direct = ok_run
    bench, out_bench = _run(tmp_path, "bench", kernel_test, "--skip-tests", "--via-bench",
                            "--bench-dir", str(tmp_path / "bench-run"))
    assert direct.returncode == 0, direct.stdout[-3000:]
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-2000:]
    assert "ran through polytrace bench" in bench.stdout
    assert sorted(p.name for p in out_bench.iterdir()) == sorted(p.name for p in out_direct.iterdir())
    ids = {name: sorted(b["fullname"] for b in json.loads((out / "packing.json").read_text())["benchmarks"])
           for name, out in (("direct", out_direct), ("bench", out_bench))}
    assert ids["bench"] == ids["direct"] and ids["direct"]
    benches = json.loads((out_bench / "packing.json").read_text())["benchmarks"]
    assert all(b["extra_info"]["check"]["ok"] is True for b in benches)
    assert (tmp_path / "bench-run" / "shards").is_dir()  # resumable: the shard records stay there


def test_runbook_exits_nonzero_naming_a_step_that_raised(tmp_path, monkeypatch, ok_run):
    """A step whose exception the summary turns into a text line (here the step estimate, which a
    CPU dry run cannot price: POLYTRACE_RUNBOOK_STRICT_ESTIMATE holds it to the GPU rule) fails the
    run with a status line naming the step; the same run without the strict rule passes."""
    kernel_test = SKIP_TESTS_KERNEL_TEST
    relaxed, _ = ok_run  # the strict run's command below, without the variable (and with a kernel test)
    assert relaxed.returncode == 0, relaxed.stdout[-3000:]
    assert "step estimate: not computed on a CPU dry run" in relaxed.stdout
    assert "probe: not run (no CUDA)" in relaxed.stdout
    monkeypatch.setenv("POLYTRACE_RUNBOOK_STRICT_ESTIMATE", "1")
    strict, _ = _run(tmp_path, "strict", kernel_test, "--skip-tests")
    assert strict.returncode == 1, strict.stdout[-3000:]
    assert "step estimate: RAISED - not computed" in strict.stdout
    assert "FAILED ==" in strict.stdout


def test_probe_plan_lists_every_decision_without_a_gpu():
    proc = subprocess.run(["python", str(ROOT / "scripts" / "device_probe.py"), "--list"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["probe", "logprob_block", "probe", "fused_vs_mm", "probe", "attention_tiles",
                                   "probe", "decode_splits"]
