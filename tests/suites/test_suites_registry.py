"""The suites' case registry (suites/registry.py and the *_cases modules): explicit cases with
stable ids, the shapes the composition layer needs (GEMM family, decode across the rollout's KV
lengths), cases run outside pytest against another copy of the kernels, wrong outputs never timed,
compiled peers never silently eager, and a whole toy session through pytest-benchmark whose raw
rounds are the device times."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from suites import registry

ROOT = Path(__file__).resolve().parents[2]
CASE_MODULES = ("logprob_cases", "attention_cases", "decode_cases", "packing_cases", "gemm_cases", "workload_cases")


@pytest.fixture(scope="module")
def all_cases():
    return {suite: registry.suite_cases(suite) for suite in registry.SUITES}


def test_every_case_is_explicit_checked_and_unique(all_cases):
    ids, test_ids = set(), set()
    for suite, cases in all_cases.items():
        assert cases, suite
        for c in cases:
            assert c.suite == suite and c.id not in ids and (c.meta.kernel, c.test_id) not in test_ids
            ids.add(c.id)
            test_ids.add((c.meta.kernel, c.test_id))
            assert c.truth is not None and c.compare is not None, f"{c.id} has no output check"
            assert c.meta.extra.get("check_subset"), c.id
    kernels = {(c.meta.family, c.meta.kernel, c.meta.mode) for cs in all_cases.values() for c in cs}
    assert {("gemm", "linear", "fwd"), ("gemm", "linear", "bwd"), ("attention", "decode_attention", "decode"),
            ("logprob", "token_logprobs", "fwd+bwd"), ("packing", "pack", "fwd")} <= kernels


def test_what_every_suite_records_is_read_back_by_the_results_reader(all_cases, monkeypatch):
    """extra_info as the harness and each case's finish hook write it passes the results reader's
    validation (a field it refuses, such as a ``measured_on`` it does not know, would fail the
    runbook's summary after a whole GPU run)."""
    from polytrace.measure.results.schema import parse_result
    from suites import harness, timing

    monkeypatch.setattr(harness, "_RECORDED_IDS", set())
    benches = []
    for suite, cases in all_cases.items():
        case = cases[0]
        bench = type("B", (), {"extra_info": {"provider": case.meta.provider}, "group": None,
                               "stats": type("S", (), {"stats": type("I", (), {"median": 1e-3})()})()})()
        check = {"ok": True, "verdict": "pass", "rule": "exact copy", "coverage": case.meta.extra["check_coverage"],
                 "after_timing": {"ok": True, "verdict": "pass", "input_copy": 0}}
        harness.record(bench, case.meta, None, timing.Plan("host", l2="n/a"), check)
        if case.finish is not None and suite != "packing":  # packing's hook re-plans a whole batch: slow
            case.finish(bench.extra_info)
        benches.append({"name": case.test_id, "fullname": f"suites/test_{suite}.py::t[{case.test_id}]",
                        "extra_info": json.loads(json.dumps(bench.extra_info)),
                        "stats": {"median": 1e-3, "data": [1e-3] * 3, "rounds": 3}})
    result = parse_result({"machine_info": {"polytrace": {"measured_on": "cpu-interpreter", "gpu_name": "cpu",
                                                          "gpu_slug": "cpu", "throttled": None,
                                                          "environment": {"throttled": None, "reasons": []}}},
                           "benchmarks": benches, "datetime": "2026-12-01T00:00:00+00:00"})
    assert len(result.benchmarks) == len(all_cases)


def test_generated_tests_run_our_providers_first_and_compiled_ones_last(all_cases):
    """A time budget cuts the end of a suite: what the gate needs comes first."""
    test = registry.make_test(all_cases["logprob"], "test_x")
    params = next(m for m in test.pytestmark if m.name == "parametrize").args[1]
    order = [(p.values[0].slow_setup, p.values[0].meta.kind) for p in params]
    kinds = [k for slow, k in order if not slow]
    assert kinds == sorted(kinds, key=lambda k: {"ours": 0, "baseline": 1}.get(k, 2))
    assert [slow for slow, _ in order] == sorted(slow for slow, _ in order)
    assert any(slow for slow, _ in order) and params[0].values[0].meta.provider == "ours"
    assert test.pytestmark[-1].name == "benchmark" or any(m.name == "benchmark" for m in test.pytestmark)


def test_suite_modules_never_bind_our_kernels_at_import():
    """Another revision's kernels, imported under another name, must be callable through the same
    cases: suites/ imports itself relatively and takes only FLOP/byte specs (and the tolerance
    rules) from polytrace_kernels at import."""
    for path in sorted((ROOT / "suites").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert node.module.split(".")[0] != "suites", f"{path.name}: import suites relatively"
                if node.module.startswith("polytrace_kernels"):
                    names = [a.name for a in node.names]
                    assert names in (["spec"], ["spec as packing_spec"]) or names == ["spec"] or all(
                        n == "spec" for n in names), f"{path.name} binds {node.module}.{names} at import"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith(("suites", "polytrace_kernels")) for a in node.names), path.name


def _gpu_shapes(monkeypatch):
    mods = {name: importlib.import_module(f"suites.{name}") for name in CASE_MODULES}
    for mod in mods.values():
        if hasattr(mod, "on_gpu"):
            monkeypatch.setattr(mod, "on_gpu", lambda: True)
    for fn in (mods["gemm_cases"].gemm_shapes, mods["decode_cases"].decode_shapes):
        fn.cache_clear()
    yield mods
    for fn in (mods["gemm_cases"].gemm_shapes, mods["decode_cases"].decode_shapes):
        fn.cache_clear()


@pytest.fixture
def gpu_shapes(monkeypatch):
    yield from _gpu_shapes(monkeypatch)


def test_gemm_family_covers_every_profile_model_at_micro_batch_tokens(gpu_shapes):
    from polytrace.run.models import get_model
    from polytrace.stepmodel.workloads import PROFILE_DEFAULTS

    gemm = gpu_shapes["gemm_cases"]
    cases = gemm.cases()
    models = {c.meta.shape["model"] for c in cases}
    wanted = {get_model(m).name for m, _ in PROFILE_DEFAULTS.values()}
    assert models == wanted
    for c in cases:
        shape = c.meta.shape
        assert (c.meta.family, c.meta.kernel, c.meta.provider, c.meta.kind) == ("gemm", "linear", "torch", "baseline")
        assert {"model", "layer", "M", "N", "K", "dtype"} <= set(shape) and c.meta.roofline == "bf16"
        assert c.meta.flops == (2 if c.meta.mode == "fwd" else 4) * shape["M"] * shape["N"] * shape["K"]
    layers = {(c.meta.shape["model"], c.meta.shape["layer"]) for c in cases}
    assert {layer for _, layer in layers} == {"qkv", "o", "gate_up", "down", "lm_head", "router"}
    q32 = {c.meta.shape["layer"]: c.meta.shape for c in cases if c.meta.shape["model"] == "qwen2.5-32b"
           and c.meta.mode == "bwd"}
    assert (q32["qkv"]["N"], q32["qkv"]["K"], q32["gate_up"]["N"], q32["lm_head"]["N"]) == (7168, 5120, 55296, 152064)
    assert 4096 <= q32["qkv"]["M"] <= 40000  # a packed micro-batch's tokens
    moe = [c.meta.shape for c in cases
           if c.meta.shape["model"] == "qwen3-235b-a22b" and c.meta.shape["layer"] == "down"]
    assert all(s["experts"] == 128 and s["M"] == max(1, round(s["tokens"] * 8 / 128)) for s in moe)
    assert {c.meta.shape["M"] for c in cases if c.meta.mode == "fwd"} >= set(gemm.DECODE_TOKENS)


def test_decode_shapes_follow_the_rollout_across_kv_lengths(gpu_shapes):
    decode = gpu_shapes["decode_cases"]
    cases = [c for c in decode.cases() if c.meta.provider == "ours"]
    assert {c.meta.profile for c in cases} == set(decode.PROFILES)
    for c in cases:
        s = c.meta.shape
        assert {"batch", "kv_len_mean", "kv_len_max", "heads_q", "heads_kv", "head_dim"} <= set(s)
        assert 1 <= s["batch"] <= decode.GPU_DECODE_SLOTS and s["kv_len_max"] >= s["kv_len_mean"]
    dapo = sorted((c.meta.shape["progress"], c.meta.shape["batch"], c.meta.shape["kv_len_max"]) for c in cases
                  if c.meta.profile == "dapo-math-32b" and c.meta.shape["model"] == "qwen2.5-32b")
    assert [p for p, _, _ in dapo] == list(decode.DECODE_POINTS)
    assert dapo[0][1] == decode.GPU_DECODE_SLOTS and dapo[-1][1] < dapo[0][1]  # the tail: few sequences left
    assert dapo[-1][2] > 4 * dapo[0][2]  # ... at long KV lengths


def test_decode_schedule_is_the_rollout_simulations():
    from polytrace.stepmodel.rollout import _schedule
    from suites import shapes

    rng = np.random.default_rng(3)
    for slots in (1, 7, 64, 1000):
        lens = rng.integers(1, 5000, size=300)
        assert np.array_equal(shapes.fifo_starts(lens, slots), _schedule(lens, slots))


def test_row_subset_references_equal_the_whole_batchs_rows():
    """The GPU-sized attention check computes single query rows (and their dq) against their own
    sequence's keys: the same numbers as the whole batch's reference at those rows."""
    import torch

    from suites.attention_ref import attention_rows, to_packed

    gen = torch.Generator().manual_seed(5)
    lens = [5, 1, 9, 3]
    q, k, v, dout = (torch.randn(sum(lens), h, 8, generator=gen, dtype=torch.float16) for h in (4, 2, 2, 4))
    whole = attention_rows(q, k, v, lens, None, None)
    rows = torch.tensor([0, 4, 5, 6, 14, 17])
    part = attention_rows(q, k, v, lens, rows, None)
    assert torch.allclose(part["want"]["out"], whole["want"]["out"][rows], rtol=0, atol=1e-12)
    wg = attention_rows(q, k, v, lens, None, dout)
    pg = attention_rows(q, k, v, lens, rows, dout)
    assert torch.allclose(pg["want"]["dq"], wg["want"]["dq"][rows], rtol=0, atol=1e-12)
    assert set(pg["want"]) == set(wg["want"]) == {"dq", "dk", "dv"}  # dk, dv on the same (key) rows
    assert torch.allclose(pg["want"]["dk"], wg["want"]["dk"][rows], rtol=0, atol=1e-12)
    assert torch.equal(pg["kv_index"], rows)
    # layouts mapped back: padded [B, H, Lmax, D] and K repeated per query head (summed per group)
    padded = torch.zeros(len(lens), 4, max(lens), 8, dtype=torch.float64)
    start = 0
    for i, n in enumerate(lens):
        padded[i, :, :n] = whole["want"]["out"][start:start + n].transpose(0, 1)
        start += n
    assert torch.equal(to_packed(padded, lens, 4), whole["want"]["out"])
    rep = wg["want"]["dk"].repeat_interleave(2, 1) / 2
    assert torch.allclose(to_packed(rep, lens, 2), wg["want"]["dk"].float(), atol=1e-6)


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_logprob_checks_on_a_row_subset_pass_ours_and_catch_a_bias(mode):
    """Past 64 rows (every GPU shape) the log-prob checks compare 64 evenly spaced rows in fp64;
    ours passes there, and a 2e-4 bias in its log-probs does not."""
    from suites import logprob_cases as lc
    from suites.harness import Case

    s = lc.TokShape("t", "", 66, 1.0, "tiny", 50, 16)
    for kernel, inputs, bind, truth, compare, coverage in (
            ("token_logprobs", lc._logits_inputs(s, mode != "fwd"), lc._bind_logits("ours", s, mode),
             lc._logits_truth(s, "ours", mode), lc._logits_compare(s, "ours", mode),
             lc._logits_coverage(s, "ours", mode)),
            ("linear_token_logprobs", lc._linear_inputs(s, mode != "fwd", False), lc._bind_linear("ours", s, mode),
             lc._linear_truth(s, "ours", mode), lc._linear_compare(s, "ours", mode),
             lc._linear_coverage(s, "ours", mode))):
        meta = Case("logprob", kernel, "ours", mode, {"T": 66, "k": kernel}, provider_kind="ours",
                    extra={"computes": ["logprob", "entropy"], "check_coverage": coverage})
        case = registry.BenchCase("logprob", meta, lc.LOGITS_PROVIDERS[0], inputs, bind, truth, compare)
        prepared = registry.prepare(case)
        assert prepared.check["ok"] is True and len(truth(inputs("cpu", 0))["rows"]) == 64
        names = [o["name"] for o in prepared.check["outputs"]]
        # every output checked, 16-bit ones with the bias check too; d(weight) on vocabulary rows over all tokens
        assert names == (["logprob", "entropy"] if mode == "fwd" else
                         ["d(logits)", "d(logits) bias"] if kernel == "token_logprobs" else
                         ["d(hidden)", "d(hidden) bias", "d(weight)", "d(weight) bias"])
        assert set(prepared.check["coverage"]) == {n for n in names if not n.endswith(" bias")}
        assert prepared.check["coverage_min"] == pytest.approx(64 / 66)  # 64 evenly spaced token rows
        if mode == "fwd":
            def biased(inp, kernels, bind=bind):
                bound = bind(inp, kernels)
                fn = bound.fn
                bound.fn = lambda: (fn()[0] + 2e-4, fn()[1])
                return bound
            bad = registry.BenchCase("logprob", meta, case.provider, inputs, biased, truth, compare)
            with pytest.raises(registry.OutputCheckFailed, match="logprob: max"):
                registry.prepare(bad)


def _load_kernels_as(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "kernels" / "__init__.py",
                                                  submodule_search_locations=[str(ROOT / "kernels")])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_a_case_runs_outside_pytest_with_another_copy_of_the_kernels(monkeypatch):
    """What ``polytrace ab`` does: the same case, the same inputs, the kernels of another revision
    imported under another module name."""
    other = _load_kernels_as("polytrace_kernels_other_rev")
    try:
        packing = importlib.import_module("polytrace_kernels_other_rev.packing")
        calls = []
        real = packing.pack
        monkeypatch.setattr(packing, "pack", lambda *a, **k: calls.append(1) or real(*a, **k))
        case = next(c for c in registry.suite_cases("packing") if c.meta.kernel == "pack" and c.meta.provider == "ours")
        m = registry.measure(case, kernels=other, rounds=2)
        assert calls and m.check["ok"] is True and m.check["rule"] == "exact copy"
        assert len(m.rounds_s) == 2 and all(t > 0 for t in m.rounds_s) and m.id == case.id
        a, b = case.make_inputs("cpu", 0), case.make_inputs("cpu", 0)
        assert (a.padded == b.padded).all()  # deterministic inputs
        # two revisions on the very same tensors, rounds interleaved
        pa, pb = registry.prepare(case, None, inputs=a), registry.prepare(case, other, inputs=a)
        ta, tb = registry.timer_for(case, pa, None), registry.timer_for(case, pb, other)
        n = len(calls)
        rounds = [t.measure() for _ in range(2) for t in (ta, tb)]
        assert pa.inputs is pb.inputs and all(r > 0 for r in rounds) and len(calls) == n + 2
    finally:
        for name in [n for n in sys.modules if n.startswith("polytrace_kernels_other_rev")]:
            del sys.modules[name]


def test_a_wrong_output_fails_naming_the_provider_and_is_never_timed():
    case = next(c for c in registry.suite_cases("packing") if c.meta.kernel == "unpack" and c.meta.provider == "torch")
    good_bind = case.bind

    def off_by_one(inputs, kernels):
        bound = good_bind(inputs, kernels)
        fn = bound.fn
        bound.fn = lambda: fn().roll(1, dims=1)  # every sequence shifted by one position
        return bound

    bad = registry.BenchCase(case.suite, case.meta, case.provider, case.make_inputs, off_by_one, case.truth,
                             case.compare)
    with pytest.raises(registry.OutputCheckFailed, match=r"^torch: wrong output, not timed: unpacked: max \|err\|"):
        registry.prepare(bad)
    assert registry.prepare(case).check["ok"] is True


def test_liger_errors_are_failures_except_the_documented_missing_option(monkeypatch):
    from suites import logprob_cases

    mod = types.ModuleType("liger_kernel.transformers.functional")
    mod.liger_fused_linear_cross_entropy = lambda h, w, t, ignore_index=-100: None  # an old liger
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", types.ModuleType("liger_kernel.transformers"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.functional", mod)
    with pytest.raises(pytest.skip.Exception, match="no reduction='none'"):
        logprob_cases._liger_fused()
    mod.liger_fused_linear_cross_entropy = lambda h, w, t, reduction="mean": 1 / 0
    fused = logprob_cases._liger_fused()
    with pytest.raises(ZeroDivisionError):  # any other error propagates: the case fails with it
        fused(None, None, None, reduction="none")


def test_compiled_peers_get_one_graph_per_shape_and_never_recompile_silently():
    import torch

    from suites import compiled

    def ref(x):
        return torch.log_softmax(x.float(), -1).sum(-1)

    copies = [compiled.fresh_function(ref, f"shape{n}") for n in range(3)]
    assert len({id(c.__code__) for c in copies}) == 3 and all(c(torch.ones(2, 3)).shape == (2,) for c in copies)
    for n in range(10):  # past dynamo's recompile limit (8) had it been one code object
        f = compiled.guarded(torch.compile(compiled.fresh_function(ref, f"s{n}"), dynamic=False, fullgraph=True,
                                           backend="eager"))
        f(torch.randn(3 + n, 5))
        f(torch.randn(3 + n, 5))
    with pytest.raises(Exception, match="[Rr]ecompil"):
        f(torch.randn(30, 5))


TABLE = "Name (time in"  # the head of pytest-benchmark's results table
TOY = '''
import pytest
import torch

from polytrace_kernels.tolerance import check_fp32
from suites import checks, registry, timing
from suites.harness import Case, Provider
from test_suites_timing import FakeDevice

DEV = FakeDevice()
TIMES = iter([300e-6 * (1 + i / 100) for i in range(1000)])


@pytest.fixture(autouse=True, scope="module")
def fake_device():
    timing.use_backend(DEV)


def inputs(device, seed):
    return torch.arange(6, dtype=torch.float32)


def bind_for(kind):
    def bind(x, kernels):
        def fn():
            if kind == "raises":
                raise RuntimeError("peer kernel exploded: invalid argument 3")
            DEV.now += next(TIMES)
            return x * 2 if kind == "good" else x * 2 + 1e-3
        return registry.Bound(fn)
    return bind


def truth(x):
    return (x * 2).double()


def compare(out, want, x):
    return [check_fp32("y", out, want, terms=1)]


def case(kind):
    p = Provider(f"toy-{kind}", kind="ours" if kind == "good" else "peer")
    meta = Case("packing", "toy", p.name, "fwd", {"n": 6}, bytes_moved=48.0, weight=1.0,
                extra={"check_coverage": {"y": checks.cover(6, 6, "elements")}})
    return registry.BenchCase("toy", meta, p, inputs, bind_for(kind), truth, compare, label=kind, rotate_inputs=False)


test_toy = registry.make_test([case("good"), case("wrong"), case("raises")], "test_toy")
'''


def test_a_toy_session_writes_device_times_checks_and_keeps_going(tmp_path):
    (tmp_path / "test_toyreg.py").write_text(TOY)
    out = tmp_path / "toy.json"
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(Path(__file__).resolve().parent),
                                         os.environ.get("PYTHONPATH", "")])}
    env.pop("POLYTRACE_BENCH_BUDGET_S", None)
    env["POLYTRACE_BENCH_ROUNDS"] = "4"  # not pytest-benchmark's default 5: a floor of 5 taken as given shows
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suites.conftest", "-p", "no:cacheprovider",
                           str(tmp_path / "test_toyreg.py"), f"--benchmark-json={out}", "--benchmark-save-data",
                           "--rootdir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:]
    assert "toy-wrong: wrong output, not timed: y: max |err| 0.001 > bound" in text
    assert "peer kernel exploded: invalid argument 3" in text and "2 failed, 1 passed" in text
    import torch

    if not torch.cuda.is_available():  # -q on a CPU: no pytest-benchmark table (the run without -q below prints it)
        assert TABLE not in text
    data = json.loads(out.read_text())
    (bench,) = data["benchmarks"]  # only the good case is a timed number
    rounds = bench["stats"]["data"]
    # the fake device's scripted launch times, not host time around flush and sync: the first
    # calls (check, the estimate's warm-up: its 1%-a-launch drift never settles, so it stops at
    # WARMUP_MAX_ROUNDS; 1 pytest-benchmark warm-up round) took the first 2 + WARMUP_MAX_ROUNDS times
    from suites import timing

    first = 2 + timing.WARMUP_MAX_ROUNDS
    assert rounds == pytest.approx([300e-6 * (1 + i / 100) for i in range(first, first + 4)], rel=1e-9, abs=0)
    assert bench["extra_info"]["warmup_settled"] is False
    assert bench["options"]["timer"].endswith("device_clock")
    info = bench["extra_info"]
    assert info["timing"] == "events" and info["l2"] == "flushed" and info["check"]["ok"] is True
    assert info["check"]["rule"].startswith("fp32") and info["provider_kind"] == "ours"
    assert info["check"]["coverage"]["y"]["fraction"] == 1.0 and info["check"]["verdict"] == "pass"
    assert info["check"]["after_timing"]["ok"] is True  # the last timed launch's output, checked again
    assert info["window_cap_s"] == 2.0 and info["empty_events_s"] == 0.0 and "host_launch_s" in info
    env_record = data["machine_info"]["polytrace"]["environment"]
    assert "throttled" in env_record and data["machine_info"]["polytrace"]["throttled"] is None


def test_benchmark_min_rounds_is_honoured_and_the_table_shown_without_q(tmp_path, monkeypatch):
    """pytest-benchmark's --benchmark-min-rounds=7 raises the suites' rounds (2 on a CPU) to 7, and a
    run without -q prints pytest-benchmark's table (the toy session above, under -q, does not: the
    table was 61 rows with lines up to 965 characters, issue 38). Without the option its default 5
    is no floor (the toy session's POLYTRACE_BENCH_ROUNDS=4 stays 4) and the CPU default stands."""
    (tmp_path / "test_toyreg.py").write_text(TOY)
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(Path(__file__).resolve().parent),
                                         os.environ.get("PYTHONPATH", "")])}
    for name in ("POLYTRACE_BENCH_BUDGET_S", "POLYTRACE_BENCH_ROUNDS", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    out = tmp_path / "toy.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "suites.conftest", "-p", "no:cacheprovider",
                           str(tmp_path / "test_toyreg.py"), "-k", "good", f"--benchmark-json={out}",
                           "--benchmark-save-data", "--rootdir", str(tmp_path), "--benchmark-min-rounds=7"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert TABLE in proc.stdout + proc.stderr
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert len(bench["stats"]["data"]) == 7
    from suites import harness

    monkeypatch.delenv("POLYTRACE_BENCH_ROUNDS", raising=False)
    monkeypatch.setattr(harness, "MIN_ROUNDS", None)  # as suites/conftest.py sets it without the option
    monkeypatch.setattr(harness, "on_gpu", lambda: False)
    assert harness.rounds_for() == (2, 0) and harness.rounds_for(host=True) == (3, 0)
