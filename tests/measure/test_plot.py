"""PNG plots of result files and gate reports."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from _results_synth import SHAPES, bench_entry, cli_main, make_result, write

from polytrace.errors import PolytraceError
from polytrace.measure.results import compare, load_result, plot_files, plot_gate, plot_throughput
from polytrace.measure.results import plots as plots_module

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 2000


def test_throughput_and_gate_plots(tmp_path):
    base = load_result(write(tmp_path / "b.json", make_result(seed=1)))
    cand = load_result(write(tmp_path / "c.json", make_result(seed=2, slowdown={SHAPES[4][0]: 1.1})))
    paths = plot_throughput(cand, tmp_path / "plots")
    assert [p.name for p in paths] == ["logprob_token_logprobs_fwd_h200_throughput.png"]
    assert _is_png(paths[0])
    gate_png = plot_gate(compare(base, cand), tmp_path / "plots")
    assert _is_png(gate_png)


def test_cli_plot_writes_to_the_given_folder(tmp_path, capsys):
    b = write(tmp_path / "b.json", make_result(seed=1))
    c = write(tmp_path / "c.json", make_result(seed=2, family="packing", measured_on="cpu-interpreter", gpu="cpu"))
    out = tmp_path / "out" / "plots"
    assert cli_main(["plot", str(b), str(c), "-o", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(p.split("/")[-1] for p in printed) == [
        "logprob_token_logprobs_fwd_h200_throughput.png", "packing_token_logprobs_fwd_cpu_throughput.png"]
    assert all(_is_png(out / p.split("/")[-1]) for p in printed)
    assert cli_main(["plot", str(b), "-o", str(out), "--baseline", str(b)]) == 0
    assert _is_png(out / "gate_b.png")


# --------------------------------------------------------------------------- issue 15 item 5, issue 17 item 5


@pytest.fixture
def drawn(monkeypatch):
    """What the plots draw: scatter y values, tick labels, axis scales, y labels, legend texts."""
    from matplotlib.axes import Axes

    seen = {"scatter_y": [], "xticklabels": [], "yticklabels": [], "xscale": [], "yscale": [], "ylabel": [],
            "legend": []}

    def spy(name, record):
        real = getattr(Axes, name)

        def wrapper(self, *args, **kwargs):
            out = real(self, *args, **kwargs)
            record(self, out, *args, **kwargs)
            return out
        monkeypatch.setattr(Axes, name, wrapper)

    spy("scatter", lambda ax, out, x, y, **k: seen["scatter_y"].append(list(y)))
    spy("set_xticklabels", lambda ax, out, labels, **k: seen["xticklabels"].append(list(labels)))
    spy("set_yticklabels", lambda ax, out, labels, **k: seen["yticklabels"].append(list(labels)))
    spy("set_xscale", lambda ax, out, v, **k: seen["xscale"].append(v))
    spy("set_yscale", lambda ax, out, v, **k: seen["yscale"].append(v))
    spy("set_ylabel", lambda ax, out, v, **k: seen["ylabel"].append(v))
    spy("legend", lambda ax, out, *a, **k: seen["legend"].append([t.get_text() for t in out.get_texts()]))
    return seen


def _result(entries, slug="h200", measured_on="cuda", gpu="NVIDIA H200"):
    return {"machine_info": {"polytrace": {"measured_on": measured_on, "gpu_name": gpu, "gpu_slug": slug,
                                           "commit": "abc123"}},
            "benchmarks": entries, "datetime": "2026-11-02T10:00:00+00:00"}


def _rounds(median, n=10, seed=0):
    return median * np.exp(np.random.default_rng(seed).normal(0, 0.01, n))


def test_planner_benchmarks_plot_time_not_zero_gbps(tmp_path, drawn):
    entries = []
    for i, seqs in enumerate((512, 2048, 8192)):
        e = bench_entry(f"tokens={seqs},vocab=1", 1 / 3, _rounds(1e-3 * (i + 1)), family="packing",
                        kernel="balance_partitions", mode="plan")
        e["extra_info"].update(flops=0.0, bytes_moved=0.0)
        entries.append(e)
    paths = plot_throughput(load_result(write(tmp_path / "p.json", _result(entries))), tmp_path / "out")
    assert [p.name for p in paths] == ["packing_balance_partitions_plan_h200_time.png"]
    assert drawn["ylabel"] == ["median time (ms)"]
    (ys,) = drawn["scatter_y"]
    assert ys == pytest.approx([1.0, 2.0, 3.0], rel=0.05)  # before: [0, 0, 0] GB/s


def test_tick_labels_are_whole_so_sizes_stay_apart(tmp_path, drawn):
    """Before: labels were cut to 25 characters + '...', so these two read the same."""
    shapes = [("vocab=151936,hidden=5120,dtype=bf16,tokens=4096", 0.5, 1e-3),
              ("vocab=151936,hidden=5120,dtype=bf16,tokens=16384", 0.5, 4e-3)]
    entries = [bench_entry(s, w, _rounds(t)) for s, w, t in shapes]
    for e, (s, _, _) in zip(entries, shapes):
        e["extra_info"]["shape_id"] = s
    plot_throughput(load_result(write(tmp_path / "r.json", _result(entries))), tmp_path / "out")
    (labels,) = drawn["xticklabels"]
    assert len(set(labels)) == 2
    assert sorted(lab.replace("\n", "") for lab in labels) == sorted(s for s, _, _ in shapes)


def test_gate_plot_has_log_axis_names_and_legend(tmp_path, drawn):
    base = load_result(write(tmp_path / "b.json", make_result(seed=1)))
    cand = load_result(write(tmp_path / "c.json", make_result(seed=2, slowdown={SHAPES[4][0]: 1.5})))
    plot_gate(compare(base, cand), tmp_path / "plots")
    assert drawn["xscale"] == ["log"]
    (labels,) = drawn["yticklabels"]
    assert any("logprob/token_logprobs · triton · fwd · tokens=65536" in lab for lab in labels)
    assert any("· torch ·" in lab for lab in labels)
    (legend,) = drawn["legend"]
    assert "regression" in legend and "unchanged" in legend and "threshold ±5%" in legend


def test_results_without_extra_info_plot_cleanly(tmp_path):
    """A plain pytest-benchmark file: no warnings, no '_x__unknown' file names."""
    raw = make_result(seed=1)
    for b in raw["benchmarks"]:
        del b["extra_info"]
    raw["machine_info"] = {"node": "x"}
    src = write(tmp_path / "plain.json", raw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = plot_files([src], tmp_path / "out")
    assert [p.name for p in paths] == ["logprob_test_token_logprobs_time.png"]
    assert all(_is_png(p) for p in paths)


def _hostile(tmp_path, edit):
    raw = make_result(seed=1)
    edit(raw)
    return write(tmp_path / "h.json", raw)


def test_all_negative_weights_are_a_clean_error_not_a_crash(tmp_path):
    """The result-file reader refuses them (weights are shares in [0, 1]), naming the benchmark."""
    src = _hostile(tmp_path, lambda r: [b["extra_info"].update(weight=-0.5) for b in r["benchmarks"]])
    with pytest.raises(PolytraceError, match=r"h.json: benchmark .*'extra_info.weight' must be a number"):
        plot_files([src], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edit", [
    lambda r: [b["extra_info"].pop("provider") for b in r["benchmarks"]],  # before: TypeError sorting
    lambda r: [b["extra_info"].update(family="f" * 5000) for b in r["benchmarks"]],  # before: name too long
    lambda r: [b["extra_info"].update(provider="_hidden") for b in r["benchmarks"]
               if b["extra_info"]["provider"] == "triton"],  # a label matplotlib's legend would drop
    lambda r: r["machine_info"]["polytrace"].update(gpu_name="g" * 5000, gpu_slug="s/" * 2000),
])
def test_hostile_result_files_plot_without_error(tmp_path, edit):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = plot_files([_hostile(tmp_path, edit)], tmp_path / "out", baseline=_hostile(tmp_path, edit))
    assert paths and all(_is_png(p) for p in paths)
    assert all(len(p.name) <= plots_module.MAX_NAME and re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in paths)


def test_file_names_are_slugged_and_bounded():
    name = plots_module.plot_file_name("a/b c", "", "..x", "k" * 500, suffix=".png")
    assert name.startswith("a-b-c_x_kkk") and name.endswith(".png") and len(name) == plots_module.MAX_NAME
    assert name != plots_module.plot_file_name("a/b c", "", "..x", "k" * 499 + "j", suffix=".png")
    assert plots_module.plot_file_name("", "", suffix=".png") == "plot.png"


def test_a_failing_plot_leaves_the_old_pngs_untouched(tmp_path, monkeypatch):
    """Before: the first PNG was replaced, then the second plot crashed."""
    b = write(tmp_path / "b.json", make_result(seed=1))
    c = write(tmp_path / "c.json", make_result(seed=2, family="packing"))
    out = tmp_path / "out"
    out.mkdir()
    old = out / "logprob_token_logprobs_fwd_h200_throughput.png"
    old.write_bytes(b"old plot")
    real = plots_module._render_throughput
    calls = []

    def second_fails(result, stage):
        calls.append(result.path)
        if len(calls) == 2:
            raise PolytraceError("boom")
        return real(result, stage)

    monkeypatch.setattr(plots_module, "_render_throughput", second_fails)
    with pytest.raises(PolytraceError, match="boom"):
        plot_files([b, c], out)
    assert old.read_bytes() == b"old plot" and sorted(p.name for p in out.iterdir()) == [old.name]
    monkeypatch.setattr(plots_module, "_render_throughput", real)
    plot_files([b, c], out)
    assert _is_png(old) and len(list(out.iterdir())) == 2


def test_same_name_twice_gets_a_suffix_not_an_overwrite(tmp_path):
    a = write(tmp_path / "a.json", make_result(seed=1))
    b = write(tmp_path / "b.json", make_result(seed=2))
    paths = plot_files([a, b], tmp_path / "out")
    assert [p.name for p in paths] == ["logprob_token_logprobs_fwd_h200_throughput.png",
                                       "logprob_token_logprobs_fwd_h200_throughput-2.png"]

