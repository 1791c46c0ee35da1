"""pack-compare: library rows, summary, CLI output and errors (verl run when installed)."""

from __future__ import annotations

import json

import pytest

from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.workload.packcompare import Row, compare, summarize, verl_unavailable


def test_compare_ours_only_rows_and_summary():
    result = compare("deepcoder-14b", steps=[0, 1], ranks=4, peers=False)
    ours = [r for r in result["rows"] if r["method"] == "ours"]
    assert [r["step"] for r in ours] == [0, 1]
    for r in ours:
        assert r["imbalance"] >= 1.0 and r["gap"] >= 0.0 and r["over_budget"] == 0
        assert r["max_microbatch_tokens"] <= result["max_tokens"]
    assert [r for r in result["rows"] if r["method"] == "verl"] == [] and result["peers_skipped"] == {}
    assert result["summary"]["ours"]["batches"] == 2


@pytest.mark.skipif(verl_unavailable() is not None, reason=str(verl_unavailable()))
def test_compare_against_verl_never_worse():
    result = compare("dapo-math-32b", steps=[0, 1], ranks=8)
    cmp_ = result["summary"]["ours_vs_verl"]
    assert cmp_["batches"] == 2 and cmp_["never_worse"]


def test_summary_flags_a_worse_batch():
    rows = [Row("p", 0, "ours", 10, 1.2, 0.1, 2, 1.2, 0, 10, 1.0),
            Row("p", 0, "verl", 10, 1.1, 0.05, 2, 1.1, 0, 10, 1.0)]
    assert summarize(rows)["ours_vs_verl"] == {"batches": 1, "never_worse": False, "better_on_average": False,
                                               "verl_at_lower_bound": False, "goal_met": False}


def test_cli_json_and_table(capsys):
    assert main(["pack-compare", "video-vl-7b", "--steps", "0", "--gpus", "4", "--no-peers", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"] == 4 and data["rows"][0]["method"] == "ours"
    assert main(["pack-compare", "video-vl-7b", "--steps", "0", "--no-peers"]) == 0
    out = capsys.readouterr().out
    assert "imbalance" in out and "ours" in out and "skipped" not in out  # not asked for: not mentioned


def test_an_unavailable_peer_is_said_once_per_command(capsys, monkeypatch):
    import polytrace.workload.packcompare as pc

    monkeypatch.setattr(pc, "verl_unavailable", lambda: "verl not importable (No module named 'tensordict')")
    assert main(["pack-compare", "video-vl-7b", "--steps", "0-2"]) == 0
    out = capsys.readouterr().out
    assert out.count("tensordict") == 1 and "verl: skipped (verl not importable" in out
    assert [ln.split()[1] for ln in out.splitlines() if ln.strip()[:1].isdigit()] == ["ours"] * 3


def test_errors_are_one_line(capsys):
    assert main(["pack-compare", "video-vl-7b", "--steps", "0", "--micro-batch-tokens", "10", "--no-peers"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("polytrace: error: --micro-batch-tokens 10 is smaller") and err.count("\n") == 1
    with pytest.raises(PolytraceError, match="--gpus"):
        compare("video-vl-7b", ranks=0, peers=False)
    assert main(["pack-compare", "no-such-profile", "--no-peers"]) == 2
