"""``polytrace report``: the main job writes a complete report and prints its tables."""

from __future__ import annotations

import json

from polytrace.cli import main


def test_report_default_writes_markdown_and_plots(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("POLYTRACE_RESULTS_DIR", str(tmp_path / "no-results"))
    out = tmp_path / "rep"
    assert main(["report", "-o", str(out), "--steps", "0-2"]) == 0
    printed = capsys.readouterr().out
    assert "dapo-math-32b" in printed and "estimated RL step" in printed and "rollout tail" in printed
    md = (out / "report.md").read_text()
    for needle in ("## Workload shape", "## Estimated RL step", "stage_breakdown.png", "response_lengths.png",
                   "**estimates**", "qwen2.5-32b"):
        assert needle in md
    for png in ("stage_breakdown.png", "response_lengths.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob("*.tmp*"))
    # the kernel breakdown of the default workload, where each family comes from, the Amdahl table
    for text in (printed, md):
        assert "update_actor s" in text and "Amdahl: the step with one kernel family 2x faster" in text
        assert "logprob: roofline" in text and "step faster by" in text
    assert "### Kernel families" in md and "| gemm " in md


def test_report_shows_measured_families_from_the_store(tmp_path, capsys, monkeypatch):
    from _compose_results import family_benches, result_file, write

    store = tmp_path / "results"
    write(store / "h200" / "2026-11-02_abc1234_logprob.json", result_file(family_benches("logprob")))
    monkeypatch.setenv("POLYTRACE_RESULTS_DIR", str(store))
    assert main(["report", "-o", str(tmp_path / "rep"), "--steps", "0-1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    families = data["estimate"]["summary"]["families"]
    assert families["logprob"]["status"] == "measured" and families["attention"]["status"] == "roofline"
    assert "2026-11-02_abc1234_logprob.json: ours" in families["logprob"]["sources"]["update_actor"]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "- logprob: measured (" in md and "- attention: roofline" in md


def test_report_json_and_other_profile(tmp_path, capsys):
    assert main(["report", "--profile", "search-r1-7b", "--gpu", "h100", "--steps", "0", "-o", str(tmp_path),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["name"] == "search-r1-7b"
    assert data["estimate"]["config"]["model"] == "qwen2.5-7b"
    assert data["estimate"]["summary"]["mean_step_s"] > 0


def test_report_bad_input(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["report", "-o", str(f)]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    assert main(["report", "--gpu", "tpu9", "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'tpu9'" in err and "h200" in err
    assert not (tmp_path / "r" / "report.md").exists()
