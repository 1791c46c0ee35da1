"""The results store: layout, ls, show, baselines, report links."""

from __future__ import annotations

import json

import pytest
from _results_synth import SHAPES, cli_main, make_result, write

from polytrace.errors import PolytraceError
from polytrace.measure.results import (
    format_show,
    list_results,
    load_result,
    report_links,
    set_baseline,
    show_rows,
    store_result,
)


def test_store_names_files_by_gpu_date_commit_suite(tmp_path):
    src = write(tmp_path / "raw.json", make_result(commit="0123456789ab"))
    dest = store_result(src, tmp_path / "results")
    assert dest == tmp_path / "results" / "h200" / "2026-11-02_0123456789ab_logprob.json"
    assert json.loads(dest.read_text()) == json.loads(src.read_text())
    with pytest.raises(PolytraceError, match="already exists"):
        store_result(src, tmp_path / "results")
    assert store_result(src, tmp_path / "results", overwrite=True) == dest


def test_baseline_merges_suites_of_one_run_and_refuses_cpu(tmp_path):
    a = write(tmp_path / "a.json", make_result())
    b = write(tmp_path / "b.json", make_result(family="packing"))
    dest = set_baseline([a, b], tmp_path / "results")
    assert dest == tmp_path / "results" / "baselines" / "h200.json"
    merged = load_result(dest)
    assert len(merged.benchmarks) == 4 * len(SHAPES) and merged.suites == ["logprob", "packing"]
    assert merged.kernel_hashes() == {"logprob": "aaaa", "packing": "aaaa"}
    # the same suite twice would shadow benchmarks
    with pytest.raises(PolytraceError, match="more than one file"):
        set_baseline([a, a], tmp_path / "results")
    cpu = write(tmp_path / "cpu.json", make_result(measured_on="cpu-interpreter", gpu="cpu"))
    with pytest.raises(PolytraceError, match="CPU interpreter"):
        set_baseline([cpu], tmp_path / "results")
    h100 = write(tmp_path / "h100.json", make_result(gpu="NVIDIA H100 80GB HBM3", family="attention"))
    with pytest.raises(PolytraceError, match="cannot merge"):
        set_baseline([a, h100], tmp_path / "results")


def test_ls_lists_results_baselines_and_tuning(tmp_path, capsys):
    root = tmp_path / "results"
    store_result(write(tmp_path / "r.json", make_result(commit="c1")), root)
    set_baseline([tmp_path / "r.json"], root)
    (root / "tuning" / "h200").mkdir(parents=True)
    (root / "tuning" / "h200" / "pack.json").write_text(json.dumps(
        {"kernel": "pack", "device_name": "NVIDIA H200", "configs": {"F1-float32": {}}, "measured_on": "cuda"}))
    (root / "h200" / "junk.json").write_text("[]")  # not a result file: ignored
    kinds = [(e.kind, e.gpu_slug) for e in list_results(root)]
    assert kinds == [("baseline", "h200"), ("result", "h200"), ("tuning", "h200")]
    assert cli_main(["results", "ls", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "baseline" in out and "2026-11-02_c1_logprob.json" in out
    assert cli_main(["results", "ls", "--root", str(tmp_path / "none")]) == 2


def test_show_table_has_throughput_and_peak_per_provider(tmp_path, capsys):
    r = load_result(write(tmp_path / "r.json", make_result(noise=1e-6)))
    rows = show_rows(r)
    first = rows[0]
    assert first["shape"] == SHAPES[0][0]  # natural order: 4096 before 16384
    assert first["provider"] == "torch" and first["vs_best"] == pytest.approx(1.5, rel=1e-3)
    assert first["gbps"] == pytest.approx(2 * 4096 * 32000 / 3.0e-3 / 1e9, rel=1e-3)
    text = format_show(r)
    assert "TFLOP/s" in text and "GB/s" in text and "% hbm" in text and "NVIDIA H200 (cuda)" in text
    cpu = load_result(write(tmp_path / "c.json", make_result(measured_on="cpu-interpreter", gpu="cpu")))
    text = format_show(cpu)
    assert "not performance figures" in text and "% hbm" not in text
    assert cli_main(["results", "show", str(tmp_path / "r.json"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == 2 * len(SHAPES)


def test_folder_of_suite_files_loads_as_one_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write(run / "logprob.json", make_result())
    write(run / "packing.json", make_result(family="packing"))
    assert len(load_result(run).benchmarks) == 4 * len(SHAPES)
    with pytest.raises(PolytraceError, match="no \\*.json"):
        load_result(tmp_path / "r0" if (tmp_path / "r0").mkdir() is None else None)


def test_report_links(tmp_path):
    root = tmp_path / "results"
    store_result(write(tmp_path / "r.json", make_result(commit="c1")), root)
    set_baseline([tmp_path / "r.json"], root)
    (root / "plots").mkdir()
    (root / "plots" / "logprob_token_logprobs_fwd_h200_throughput.png").write_bytes(b"\x89PNG")
    links = report_links(root)
    titles = [t for t, _ in links]
    assert titles[0] == "baseline: h200" and titles[1].startswith("results: h200 2026-11-02 c1 logprob")
    assert titles[-1].startswith("plot: logprob token logprobs")
    assert all(p.is_file() for _, p in links)
    assert report_links(tmp_path / "missing") == []
