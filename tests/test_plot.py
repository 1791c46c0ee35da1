"""PNG plots of result files and gate reports."""

from __future__ import annotations

from test_results_synth import SHAPES, cli_main, make_result, write

from polytrace.results import compare, load_result, plot_gate, plot_throughput

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
