"""What the results store and the gate refuse: CPU-interpreter timings (store, as set-baseline
does) and runs whose environment record marks them throttled (store, set-baseline, gate), each
unless forced, with a one-line error naming the file and the reason."""

from __future__ import annotations

import pytest
from _results_synth import cli_main, make_result, write

from polytrace.errors import PolytraceError
from polytrace.measure.results import GatePolicy, compare, format_show, load_result, set_baseline, store_result
from polytrace.measure.results.store import format_brief

REASON = "SM clock sat at 1500 MHz (median of 12 samples after the timed rounds), below 90% of its max 1980 MHz"


def throttled_result(**kw) -> dict:
    obj = make_result(**kw)
    obj["machine_info"]["polytrace"].update(throttled=True, throttle_reasons=[REASON],
                                            environment={"throttled": True, "reasons": [REASON]})
    return obj


def test_store_refuses_cpu_interpreter_results(tmp_path, capsys):
    cpu = write(tmp_path / "cpu.json", make_result(measured_on="cpu-interpreter", gpu="cpu"))
    with pytest.raises(PolytraceError, match="cpu.json: timed in the CPU interpreter"):
        store_result(cpu, tmp_path / "results")
    assert not (tmp_path / "results").exists()
    assert cli_main(["results", "store", str(cpu), "--root", str(tmp_path / "results")]) == 2
    assert "CPU interpreter" in capsys.readouterr().err
    assert store_result(cpu, tmp_path / "results", allow_cpu=True).is_file()


def test_store_and_set_baseline_refuse_a_throttled_run_unless_forced(tmp_path, capsys):
    hot = write(tmp_path / "hot.json", throttled_result())
    root = tmp_path / "results"
    with pytest.raises(PolytraceError, match="hot.json: the run is marked throttled .*1500 MHz"):
        store_result(hot, root)
    with pytest.raises(PolytraceError, match="marked throttled"):
        set_baseline([hot], root)
    assert not root.exists()
    assert cli_main(["results", "store", str(hot), "--root", str(root)]) == 2
    assert cli_main(["results", "set-baseline", str(hot), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("polytrace: error:") == 2 and "--allow-throttled" in err
    assert cli_main(["results", "store", str(hot), "--root", str(root), "--allow-throttled"]) == 0
    # the old spelling still works, with a note naming the new one
    assert cli_main(["results", "set-baseline", str(hot), "--root", str(root), "--force"]) == 0
    assert "--force is deprecated; use --allow-throttled" in capsys.readouterr().err
    assert load_result(root / "baselines" / "h200.json").throttled  # the mark travels with the file


def test_a_quiet_run_is_not_refused(tmp_path):
    quiet = make_result()
    quiet["machine_info"]["polytrace"].update(throttled=False, throttle_reasons=[])
    dest = store_result(write(tmp_path / "q.json", quiet), tmp_path / "results")
    assert not load_result(dest).throttled


def test_a_throttled_file_in_a_folder_marks_the_merged_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write(run / "logprob.json", make_result())
    write(run / "packing.json", throttled_result(family="packing"))
    merged = load_result(run)
    assert merged.throttled and merged.throttle_reasons() == [f"packing.json: {REASON}"]
    with pytest.raises(PolytraceError, match="marked throttled"):
        set_baseline([run], tmp_path / "results")


def test_gate_refuses_a_throttled_run_unless_forced(tmp_path, capsys):
    base = load_result(write(tmp_path / "base.json", make_result()))
    hot = load_result(write(tmp_path / "hot.json", throttled_result(seed=1)))
    report = compare(base, hot)
    assert report.exit_code == 2 and any("candidate run is marked throttled" in r for r in report.refusals)
    assert compare(hot, base).exit_code == 2
    assert compare(base, hot, policy=GatePolicy(force=True)).exit_code == 0
    assert cli_main(["gate", str(tmp_path / "base.json"), str(tmp_path / "hot.json")]) == 2
    assert cli_main(["gate", str(tmp_path / "base.json"), str(tmp_path / "hot.json"), "--force"]) == 0
    capsys.readouterr()


def test_show_and_summary_say_throttled(tmp_path):
    hot = load_result(write(tmp_path / "hot.json", throttled_result()))
    assert "THROTTLED: " + REASON in format_show(hot)
    assert "THROTTLED" in format_brief(hot)
    assert "THROTTLED" not in format_show(load_result(write(tmp_path / "q.json", make_result())))
