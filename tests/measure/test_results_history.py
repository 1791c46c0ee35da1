"""``polytrace results history``: series across stored runs, change points, coinciding version
changes, plots written all or nothing, and ``-k`` expressions."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _results_synth import cli_main, make_result, write

from polytrace.errors import PolytraceError
from polytrace.measure.results import store_result
from polytrace.measure.results.history import find_change_points, load_history, plot_history
from polytrace.measure.results.select import keyword_matcher

OURS_4096 = "logprob/token_logprobs/triton/fwd/tokens=4096,vocab=32000"


def make_store(tmp_path, n_runs=12, step_at=7, step=1.25, drift=0.03, torch_change_at=7, seed=0):
    """``n_runs`` stored runs, one a day, each session drifting by ``drift`` (log-normal, shared by
    every benchmark of the run); our kernel gets ``step`` times slower from run ``step_at`` on and
    torch's version changes at ``torch_change_at``."""
    rng = np.random.default_rng(seed)
    root = tmp_path / "results"
    for d in range(n_runs):
        session = float(np.exp(rng.normal(0.0, drift)))
        ours = session * (step if step_at is not None and d >= step_at else 1.0)
        obj = make_result(seed=100 + d, commit=f"c{d:02d}", datetime=f"2026-11-{d + 1:02d}T10:00:00+00:00",
                          provider_slowdown={"triton": ours, "torch": session})
        if torch_change_at is not None and d >= torch_change_at:
            obj["machine_info"]["polytrace"]["torch_version"] = "2.12.0"
        store_result(write(tmp_path / f"run{d}.json", obj), root)
    return root


def test_change_point_with_the_version_change_that_coincides(tmp_path):
    h = load_history(make_store(tmp_path), keyword="4096")
    assert [s.id for s in h.series] == [OURS_4096.replace("triton", "torch"), OURS_4096]
    torch, ours = h.series
    assert len(ours.points) == 12 and [p.commit for p in ours.points][:2] == ["c00", "c01"]
    [cp] = ours.change_points
    assert cp.index == 7 and (cp.commit_before, cp.commit_after) == ("c06", "c07") and cp.date == "2026-11-08"
    assert 0.15 < cp.change < 0.35 and cp.p_value < 0.01
    assert cp.coinciding == ["torch 2.11.0 -> 2.12.0"]
    assert torch.change_points == []  # the control only drifts


def test_session_drift_alone_gives_no_change_point(tmp_path):
    # 12 runs of pure session-to-session drift (5%); a U test on the windows' pooled rounds gives
    # p < 1e-10 at 3 of these splits, the per-run medians' t-test at none
    h = load_history(make_store(tmp_path, step_at=None, drift=0.05, torch_change_at=None))
    assert len(h.series) == 10 and all(not s.change_points for s in h.series)


def test_find_change_points_unit():
    flat = [0.0, 0.01, -0.01, 0.0, 0.02, -0.02]
    up = [math.log(1.2) + x for x in flat]
    assert [(i, round(c, 2)) for i, c, _ in find_change_points(flat + up)] == [(6, 0.2)]
    assert find_change_points(flat + flat) == []
    # one throttled run is not a change of level
    assert find_change_points(flat + [math.log(1.5)] + flat) == []
    # a 3% step is below the 5% threshold, whatever its significance
    assert find_change_points(flat + [math.log(1.03) + x for x in flat]) == []
    assert [i for i, _, _ in find_change_points(flat + up, threshold=0.25)] == []


def test_cli_history_text_json_and_plot(tmp_path, capsys):
    root = make_store(tmp_path)
    out = tmp_path / "plots"
    assert cli_main(["results", "history", "--root", str(root), "-k", "triton and 4096", "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1 benchmark(s) over 12 run(s)" in text and "Welch's two-sided t-test" in text
    assert "(commit c06 -> c07)" in text and "coincides with torch 2.11.0 -> 2.12.0" in text
    assert "*   2026-11-08  c07" in text  # the run table marks the change point
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 1 and pngs[0].read_bytes()[:4] == b"\x89PNG" and not list(out.glob(".history-*"))
    assert cli_main(["results", "history", "--root", str(root), "-k", "triton and 4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["series"][0]["change_points"][0]["index"] == 7 and data["n_runs"] == 12


def test_plots_are_all_or_nothing(tmp_path, monkeypatch):
    import matplotlib.figure

    h = load_history(make_store(tmp_path), keyword="triton")
    real = matplotlib.figure.Figure.savefig
    calls = []

    def fail_on_third(self, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", fail_on_third)
    out = tmp_path / "plots"
    with pytest.raises(PolytraceError, match="--plot .*cannot write the plots: No space left on device"):
        plot_history(h, out)
    # neither the two finished plots nor the temporary folder (nor the folder the call created)
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "a100"], "--gpu a100: no stored runs of that GPU under"),
    (["-k", "nothing_like_this"], "-k 'nothing_like_this': matches no timed benchmark in 3 stored run(s)"),
    (["-k", "triton and"], "expected a word after the last operator"),
    (["--window", "2"], "--window: at least 3 runs, got 2"),
    (["--threshold", "5"], "did you mean 5%?"),
])
def test_cli_history_bad_input(tmp_path, capsys, argv, needle):
    root = make_store(tmp_path, n_runs=3)
    try:
        code = cli_main(["results", "history", "--root", str(root), *argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("polytrace: error: ") and err.count("\n") == 1 and needle in err, err


def test_unreadable_and_cpu_runs_are_noted_not_fatal(tmp_path):
    root = make_store(tmp_path, n_runs=3)
    (root / "h200" / "broken.json").write_text("{")
    cpu = make_result(measured_on="cpu-interpreter", gpu="cpu")
    store_result(write(tmp_path / "cpu.json", cpu), root, allow_cpu=True)  # store refuses CPU runs unless allowed
    h = load_history(root)
    assert h.n_runs == 3
    assert any("skipped 1 unreadable file(s)" in n and "broken.json" in n for n in h.notes)
    assert any("skipped 1 CPU-interpreter run(s)" in n for n in h.notes)
    assert load_history(root, gpu="cpu").n_runs == 1


@pytest.mark.parametrize("expr,hits", [
    ("triton", {"a/triton/fwd", "b/triton/bwd"}),
    ("TRITON and not bwd", {"a/triton/fwd"}),
    ("(fwd or bwd) and not triton", {"a/torch/fwd"}),
    ("not (a or b)", set()),
    ("", {"a/triton/fwd", "b/triton/bwd", "a/torch/fwd"}),
])
def test_keyword_expressions(expr, hits):
    ids = ["a/triton/fwd", "b/triton/bwd", "a/torch/fwd"]
    match = keyword_matcher(expr)
    assert {i for i in ids if match(i)} == hits


@pytest.mark.parametrize("expr,needle", [("and x", "unexpected 'and'"), ("(a or b", "missing ')'"),
                                         ("a b", "unexpected 'b'"), ("not " * 40 + "a", "nested more than")])
def test_bad_keyword_expressions(expr, needle):
    with pytest.raises(PolytraceError, match=needle.replace("(", "\\(").replace(")", "\\)")):
        keyword_matcher(expr)
