"""What the results reader refuses so a GPU run's numbers can be trusted: a median below the case's
roofline floor (results show, store and gate, naming the case), zero or negative times, an output
check without coverage or one that failed, and contradictory clock records; each as one line, exit
2, nothing stored. And what ``results show`` adds: predicted time beside the measured one, a flag
when they are more than 2x apart, the check's verdict and coverage."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from _results_synth import cli_main, make_result, write

from polytrace.errors import PolytraceError
from polytrace.measure.results import floor, format_show, load_result, store_result
from polytrace.run.hardware import get_gpu

ID = "logprob/token_logprobs/triton/fwd/tokens=4096,vocab=32000"
COVERAGE = {"logprob": {"checked": 64, "of": 4096, "unit": "token rows", "fraction": 64 / 4096}}


def _bench(obj: dict, bench_id: str = ID) -> dict:
    for b in obj["benchmarks"]:
        info = b["extra_info"]
        if "/".join(info[k] for k in ("family", "kernel", "provider", "mode", "shape_id")) == bench_id:
            return b
    raise KeyError(bench_id)


def _with(obj: dict, **extra) -> dict:
    out = copy.deepcopy(obj)
    _bench(out)["extra_info"].update(extra)
    return out


def _below_roofline() -> dict:
    """Our token_logprobs at 4096 x 32000 reads 262 MB: 54.6 us at the H200's 4.8 TB/s. Rounds of
    ~30 us with cold inputs (l2 "flushed") are below that floor."""
    obj = make_result()
    b = _bench(obj)
    rounds = np.full(30, 30e-6) * np.exp(np.random.default_rng(0).normal(0, 0.01, 30))
    b["stats"].update(data=[float(x) for x in rounds], median=float(np.median(rounds)))
    b["extra_info"].update(l2="flushed", median_s=float(np.median(rounds)))
    return obj


def test_the_floor_is_the_cases_own_bound_on_the_gpu():
    h200 = get_gpu("h200")
    t, basis = floor.floor_s(h200, flops=1e12, bytes_moved=4.8e9, roofline="hbm", l2="flushed")
    assert t == pytest.approx(1e-3) and "4.8 TB/s" in basis  # bytes / bandwidth; elementwise FLOPs ignored
    t, basis = floor.floor_s(h200, flops=989.4e9, bytes_moved=4.8e6, roofline="bf16", l2="flushed")
    assert t == pytest.approx(1e-3) and "TFLOP/s" in basis
    # warm inputs may come from L2: no bandwidth floor, the compute floor stays
    assert floor.floor_s(h200, flops=1e12, bytes_moved=4.8e9, roofline="hbm", l2="warm")[0] == 0.0
    assert floor.floor_s(h200, flops=989.4e9, bytes_moved=4.8e9, roofline="bf16", l2="warm")[0] == pytest.approx(1e-3)
    # the minimum counts, when a case gives them, replace the conventional ones
    assert floor.floor_s(h200, flops=2e12, bytes_moved=0, roofline="bf16", l2="flushed",
                         floor_flops=989.4e9)[0] == pytest.approx(1e-3)
    assert floor.floor_s(None, flops=1e12, bytes_moved=1e9, roofline="bf16", l2="flushed")[0] == 0.0


def test_prediction_and_its_2x_flag():
    h200 = get_gpu("h200")
    t, basis = floor.predicted_s(h200, flops=0, bytes_moved=4.3e9, roofline="hbm")
    assert t == pytest.approx(1e-3) and "attainable" in basis  # the measured 4.3 TB/s copy rate
    t, basis = floor.predicted_s(h200, flops=0, bytes_moved=4.3e9, roofline="hbm", static_s=3e-3, static_note="x")
    assert t == 3e-3 and basis.startswith("static report")
    assert floor.prediction_flag(2.01e-3, 1e-3).startswith("look: 2.01x slower")
    assert floor.prediction_flag(0.49e-3, 1e-3).startswith("look: 2.04x faster")
    assert floor.prediction_flag(1.99e-3, 1e-3) == "" and floor.prediction_flag(0.51e-3, 1e-3) == ""


def test_a_median_below_the_roofline_is_refused_by_show_store_and_gate(tmp_path, capsys):
    bad = write(tmp_path / "fast.json", _below_roofline())
    good = write(tmp_path / "base.json", make_result())
    with pytest.raises(PolytraceError, match=f"fast.json: benchmark {ID}: median .* below its roofline floor"):
        load_result(bad)
    root = tmp_path / "results"
    for argv in (["results", "show", str(bad)], ["results", "store", str(bad), "--root", str(root)],
                 ["gate", str(good), str(bad)]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("polytrace: error:") and err.count("\n") == 1 and ID in err and "Traceback" not in err
    assert not root.exists()  # nothing stored
    # the same rounds with warm inputs are not below any floor the reader can vouch for
    warm = _below_roofline()
    _bench(warm)["extra_info"]["l2"] = "warm"
    assert load_result(write(tmp_path / "warm.json", warm)).by_id()[ID].median_s < 55e-6
    # a CPU-interpreter file has no GPU floor
    cpu = _below_roofline()
    cpu["machine_info"]["polytrace"]["measured_on"] = "cpu-interpreter"
    for b in cpu["benchmarks"]:
        b["extra_info"]["measured_on"] = "cpu-interpreter"
    load_result(write(tmp_path / "cpu.json", cpu))


BAD_FILES = {
    "zero median": ({"median_s": 0.0}, "'extra_info.median_s' must be a number in (0"),
    "negative median": ({"median_s": -1e-3}, "'extra_info.median_s' must be a number in (0"),
    "check without coverage": ({"check": {"ok": True, "rule": "fp32"}}, "'check' has no 'coverage'"),
    "coverage beyond the output": ({"check": {"ok": True, "coverage": {"logprob": {"checked": 65, "of": 64}}}},
                                   "must check 1..of units"),
    "failed check, timed": ({"check": {"ok": False, "verdict": "fail", "coverage": COVERAGE}},
                            "failed, yet the benchmark was timed"),
    "failed recheck": ({"check": {"ok": True, "verdict": "pass", "coverage": COVERAGE,
                                  "after_timing": {"ok": False}}}, "last timed launch was wrong"),
    "clock min above max": ({"sm_clock": {"min_mhz": 1980, "median_mhz": 1900, "max_mhz": 1800}},
                            "'sm_clock' contradicts itself"),
    "not throttled at 70%": ({"sm_clock": {"min_mhz": 1400, "median_mhz": 1900, "max_mhz": 1980},
                              "session_max_mhz": 1980, "throttled": False}, "'throttled' is false but"),
    "throttled at max": ({"sm_clock": {"min_mhz": 1970, "median_mhz": 1975, "max_mhz": 1980},
                          "session_max_mhz": 1980, "throttled": True}, "'throttled' is true but"),
    "session max below own": ({"sm_clock": {"min_mhz": 1970, "median_mhz": 1975, "max_mhz": 1980},
                               "session_max_mhz": 1500}, "'session_max_mhz'"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_results_files_are_one_line_errors_naming_the_case_and_nothing_is_stored(tmp_path, capsys, name):
    extra, message = BAD_FILES[name]
    path = write(tmp_path / "bad.json", _with(make_result(), **extra))
    with pytest.raises(PolytraceError, match="bad.json: benchmark ") as err:
        load_result(path)
    assert message in str(err.value) and "\n" not in str(err.value)
    root = tmp_path / "results"
    assert cli_main(["results", "store", str(path), "--root", str(root)]) == 2
    out = capsys.readouterr().err
    assert out.startswith("polytrace: error:") and message in out and "Traceback" not in out
    assert not root.exists()


def test_a_throttled_benchmark_in_a_run_recorded_as_quiet_is_contradictory(tmp_path):
    obj = _with(make_result(), sm_clock={"min_mhz": 1500, "median_mhz": 1900, "max_mhz": 1980},
                session_max_mhz=1980, throttled=True)
    obj["machine_info"]["polytrace"]["throttled"] = False
    with pytest.raises(PolytraceError, match=f"benchmark {ID}: marked throttled, but the run's environment"):
        load_result(write(tmp_path / "c.json", obj))
    obj["machine_info"]["polytrace"].update(throttled=True, throttle_reasons=["1 benchmark(s) ran slow"])
    assert load_result(write(tmp_path / "d.json", obj)).throttled  # consistent: read, then refused by store/gate
    with pytest.raises(PolytraceError, match="marked throttled"):
        store_result(tmp_path / "d.json", tmp_path / "results")


def test_show_puts_the_prediction_beside_the_measurement_and_flags_a_2x_miss(tmp_path):
    obj = make_result()
    check = {"ok": True, "verdict": "pass", "coverage": COVERAGE, "coverage_min": 64 / 4096}
    for b in obj["benchmarks"]:
        b["extra_info"].update(predicted_s=b["stats"]["median"] / 1.5, check=check)
    _bench(obj)["extra_info"].update(predicted_s=_bench(obj)["stats"]["median"] / 3.0,
                                     prediction_flag="look: 3.00x slower than predicted")
    peer = "logprob/token_logprobs/torch/fwd/tokens=4096,vocab=32000"
    _bench(obj, peer)["extra_info"]["check"] = {**check, "ok": False, "verdict": "16-bit-only"}
    text = format_show(load_result(write(tmp_path / "p.json", obj)))
    assert "predicted" in text and "vs pred" in text and "1.50x" in text and "3.00x !" in text
    assert f"{ID}: look: 3.00x slower than predicted" in text
    assert f"{peer}: output meets only the 16-bit bound" in text and "16-bit only 2%" in text
    assert text.count("look:") == 1  # only the case off by more than 2x


def test_the_runbook_summary_says_every_case_is_checked_none_throttled_and_lists_prediction_misses(tmp_path):
    from suites.runbook import trust_line

    obj = make_result()
    check = {"ok": True, "verdict": "pass", "coverage": COVERAGE, "coverage_min": 64 / 4096}
    for b in obj["benchmarks"]:
        b["extra_info"]["check"] = check
    _bench(obj)["extra_info"]["prediction_flag"] = "look: 2.50x slower than predicted"
    line = trust_line(load_result(write(tmp_path / "r.json", obj)))
    n = len(obj["benchmarks"])
    assert f"{n} of {n} benchmarks checked (smallest coverage 1.6%)" in line and "none throttled" in line
    assert f"1 off their prediction by more than 2x: {ID} (look: 2.50x slower" in line
    del obj["benchmarks"][0]["extra_info"]["check"]
    assert f"{n - 1} of {n} benchmarks checked" in trust_line(load_result(write(tmp_path / "s.json", obj)))
