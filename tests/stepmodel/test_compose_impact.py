"""``polytrace impact``: a change in kernel timings as a change in RL step time, and the same line
under the gate's verdict. Result files are built here ("cuda", known medians)."""

from __future__ import annotations

import json
import re

import pytest
from _compose_results import all_benches, family_benches, result_file, write

from polytrace.cli import main
from polytrace.measure.results import load_result
from polytrace.stepmodel import MEASURED, estimate
from polytrace.stepmodel.efficiency import PRIORS
from polytrace.stepmodel.impact import ImpactResult, impact, step_time_line

GEMM_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
LINE = "step time on dapo-math-32b / qwen2.5-32b / 32 x H200: "


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """Every family measured for the default workload's model (qwen2.5-32b on H200)."""
    return write(tmp_path_factory.mktemp("impact") / "baseline.json", result_file(all_benches(gemm_tokens=GEMM_TOKENS)))


@pytest.fixture(scope="module")
def shares(baseline):
    """Each family's share of the step as ``estimate`` prices it by default (the shared priors),
    which ``impact`` prices too."""
    res = estimate("dapo-math-32b", "qwen2.5-32b", "h200", 32, steps=range(8), results=[str(baseline)],
                   calibration=PRIORS)
    return {f: d["share"] for f, d in res.summary["families"].items()}


@pytest.mark.parametrize("family", list(MEASURED))
def test_a_family_10pct_slower_costs_10pct_of_its_share_of_the_step(tmp_path, baseline, shares, family):
    """The goal is 0.5 points of the step on the default workload; what holds (and what
    docs/step-model.md states) is 0.00005 points, i.e. 5e-7 as a fraction: measured about 1e-15 for
    every family at the time of writing (the slowest rank and engine could change on 32 GPUs, and do
    not here)."""
    cand = write(tmp_path / "cand.json", result_file(all_benches(gemm_tokens=GEMM_TOKENS, factors={family: 1.1})))
    res = impact(str(baseline), str(cand))
    assert abs(res.step_change - 0.1 * shares[family]) <= 0.00005 / 100, (res.step_change, shares[family])
    assert res.step_change > 0
    assert res.line.startswith(LINE) and res.line.endswith("%")
    assert res.kernels and {k["family"] for k in res.kernels} == {family}
    assert sum(k["change_s"] for k in res.kernels) == pytest.approx(
        res.candidate["step_s"] - res.baseline["step_s"], rel=1e-9)
    moved = {b["id"].split("/")[0] for b in res.benchmarks}
    assert moved == {MEASURED[family].results_family}


def test_the_step_is_priced_with_the_priors_unless_roofline_is_asked(tmp_path, baseline):
    """The priors' host work and constants lengthen the step a kernel's change is a share of: the
    same 10% slower GEMMs move the roofline-priced step by more (a larger share of a shorter
    step), and each basis agrees with ``estimate`` priced the same way."""
    cand = write(tmp_path / "cand.json", result_file(all_benches(gemm_tokens=GEMM_TOKENS, factors={"gemm": 1.1})))
    priced = impact(str(baseline), str(cand))
    bare = impact(str(baseline), str(cand), roofline=True)
    assert priced.workload["priced"] == "shared priors" and bare.workload["priced"] == "roofline"
    assert bare.baseline["step_s"] < priced.baseline["step_s"]
    for res, cal in ((priced, PRIORS), (bare, None)):
        est = estimate("dapo-math-32b", "qwen2.5-32b", "h200", 32, steps=range(8), results=[str(baseline)],
                       calibration=cal)
        assert res.baseline_step_s == pytest.approx(est.summary["mean_step_s"], rel=1e-12)
        gemm = est.summary["families"]["gemm"]["share"]
        assert res.step_change == pytest.approx(0.1 * gemm, abs=5e-7)


def test_a_one_suite_candidate_changes_only_its_kernels(tmp_path, baseline):
    # the candidate ran the log-prob suite only: token_logprobs 20% slower, the fused kernel 50%
    cand = [b for b in family_benches("logprob", factor=1.2) if b["extra_info"]["kernel"] == "token_logprobs"]
    cand += [b for b in family_benches("logprob", factor=1.5) if b["extra_info"]["kernel"] != "token_logprobs"]
    res = impact(str(baseline), str(write(tmp_path / "logprob.json", result_file(cand))))
    assert {k["family"] for k in res.kernels} == {"logprob"}
    assert {k["stage"] for k in res.kernels} == {"old_log_prob", "ref", "update_actor"}
    assert res.stages["gen"]["change_s"] == 0.0
    on_path = {b["id"].split("/")[1] for b in res.benchmarks if b["on_path"]}
    off_path = {b["id"].split("/")[1] for b in res.benchmarks if not b["on_path"]}
    assert on_path == {"token_logprobs"} and off_path == {"linear_token_logprobs"}
    assert res.benchmarks[0]["on_path"]  # the ones that cost step time first
    # and a candidate identical to the baseline moves nothing
    same = impact(str(baseline), str(baseline))
    assert same.step_change == 0.0 and not same.kernels and not same.benchmarks
    assert same.line == LINE + "+0.00%"


def test_impact_cli_text_markdown_json(tmp_path, baseline, capsys):
    cand = write(tmp_path / "c.json", result_file(all_benches(gemm_tokens=GEMM_TOKENS, factors={"decode": 1.5})))
    assert main(["impact", str(baseline), str(cand), "--steps", "0-1"]) == 0
    out = capsys.readouterr().out
    assert "kernels that cause it:" in out and re.search(r"\ngen +decode +\+\d", out)
    assert out.strip().splitlines()[-1].startswith(LINE + "+")
    assert main(["impact", str(baseline), str(cand), "--steps", "0-1", "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "| stage" in md and f"**{LINE}" in md
    assert main(["impact", str(baseline), str(cand), "--steps", "0-1", "--json", "--profile", "search-r1-7b",
                 "--model", "qwen2.5-32b", "--gpus", "8"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"] == {"profile": "search-r1-7b", "model": "qwen2.5-32b", "gpus": 8, "gpu": "h200",
                                "steps": [0, 1], "seed": 0, "priced": "shared priors"}
    assert data["step_change"] > 0 and data["stages"]["gen"]["change_s"] > 0
    typed = ImpactResult.from_json(data)  # the --json document is the type's, key for key and in order
    assert typed.to_json() == data and list(typed.to_json()) == list(data) and typed.line == data["line"]


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("polytrace: error:") and "\n" not in err, err
    return err


def test_impact_refuses_other_gpus_models_and_cpu_timings(tmp_path, baseline, capsys):
    h100 = write(tmp_path / "h100.json", result_file(family_benches("decode"), gpu="NVIDIA H100 80GB HBM3",
                                                      slug="h100-sxm"))
    err = _one_line_error(capsys, ["impact", str(baseline), str(h100)])
    assert "BASELINE was measured on h200, CANDIDATE on h100-sxm" in err
    err = _one_line_error(capsys, ["impact", str(baseline), str(baseline), "--gpu", "h100"])
    assert "BASELINE" in err and "not --gpu h100-sxm" in err
    cpu = write(tmp_path / "cpu.json", result_file(family_benches("decode", measured_on="cpu-interpreter"),
                                                   measured_on="cpu-interpreter"))
    assert "CANDIDATE" in _one_line_error(capsys, ["impact", str(baseline), str(cpu)])
    err = _one_line_error(capsys, ["impact", str(baseline), str(baseline), "--model", "qwen2.5-7b"])
    assert "--model qwen2.5-7b: gemm (torch) was measured at the linear shapes of qwen2.5-32b" in err
    assert "not found" in _one_line_error(capsys, ["impact", str(baseline), str(tmp_path / "missing.json")])


def test_step_time_line_never_raises_for_what_the_gate_accepts(tmp_path):
    # an unknown GPU has no hardware preset: the line says so instead of failing the gate
    odd = result_file(family_benches("decode"), gpu="NVIDIA RTX 9090", slug="nvidia-rtx-9090")
    r = load_result(write(tmp_path / "odd.json", odd))
    res = step_time_line(r, r)
    assert res["step_change"] is None and "not estimated" in res["line"] and "no hardware preset" in res["line"]


def test_gate_prints_the_step_time_under_its_verdict(tmp_path, baseline, capsys):
    cand = write(tmp_path / "c.json", result_file(all_benches(gemm_tokens=GEMM_TOKENS, factors={"attention": 1.3})))
    code = main(["gate", str(baseline), str(cand)])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and "regression" in " ".join(out)
    # right under the verdict line (GateReport.impact), in every format
    assert out[0].startswith("polytrace gate: FAIL")
    assert out[1].startswith(LINE + "+") and out[1] != LINE + "+0.00%"
    main(["gate", str(baseline), str(cand), "--markdown"])
    md = capsys.readouterr().out.strip().splitlines()
    assert md[0].startswith("### polytrace gate: **FAIL**") and md[2].startswith(f"**{LINE}+")
    main(["gate", str(baseline), str(cand), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["step_time"]["line"].startswith(LINE) and data["step_time"]["step_change"] > 0
    assert data["impact"] == [data["step_time"]["line"]]
    # a refused comparison (different GPUs) has no step-time line
    h100 = write(tmp_path / "h100.json", result_file(family_benches("attention"), gpu="NVIDIA H100 80GB HBM3",
                                                      slug="h100-sxm"))
    assert main(["gate", str(baseline), str(h100)]) == 2
    assert "step time on" not in capsys.readouterr().out


def test_our_log_prob_kernel_moves_the_step_though_a_stock_run_prices_eager_torch(tmp_path):
    """The estimate prices log-prob with eager torch (what a stock verl run uses); impact asks what
    our kernels' timings do, so where both sides measured ours it prices the run with ours."""
    eager = family_benches("logprob", model="qwen2.5-7b", provider="torch-eager")
    # ours 2x faster in the candidate, at the fixture's rates (none below its roofline floor)
    ours = family_benches("logprob", model="qwen2.5-7b", provider="ours", factor=2.0)
    faster = family_benches("logprob", model="qwen2.5-7b", provider="ours")
    base = write(tmp_path / "base.json", result_file(eager + ours))
    cand = write(tmp_path / "cand.json", result_file(eager + faster))
    res = impact(str(base), str(cand), model="qwen2.5-7b", gpus=8, steps=[0])
    assert res.providers == {"logprob": "ours"}
    assert res.step_change < 0 and {k["family"] for k in res.kernels} == {"logprob"}
    # eager torch alone measured: priced as the stock run, our kernel is not on the path
    only_eager = write(tmp_path / "eager.json", result_file(eager))
    res = impact(str(only_eager), str(only_eager), model="qwen2.5-7b", gpus=8, steps=[0])
    assert res.providers == {} and res.step_change == 0.0


def test_impact_cli_roofline_flag(tmp_path, baseline, capsys):
    cand = write(tmp_path / "c.json", result_file(all_benches(gemm_tokens=GEMM_TOKENS, factors={"gemm": 1.1})))
    steps = []
    for extra in ([], ["--roofline"]):
        assert main(["impact", str(baseline), str(cand), "--steps", "0-1", *extra]) == 0
        head = capsys.readouterr().out.splitlines()[0]
        assert ("at the roofline" in head) == bool(extra) and ("at the shared priors" in head) != bool(extra)
        assert main(["impact", str(baseline), str(cand), "--steps", "0-1", "--json", *extra]) == 0
        steps.append(json.loads(capsys.readouterr().out)["baseline"]["step_s"])
    assert steps[1] < steps[0]  # the roofline's step is the shorter


def test_impact_prices_the_run_it_is_given(tmp_path, baseline, capsys):
    """The run's shape reaches the estimate both sides are priced with: an FP8 engine's GEMMs are
    at the roofline (the suite times bf16), so a GEMM change moves its generation less; a larger
    rollout TP and a Megatron trainer change the baseline step."""
    cand = write(tmp_path / "c.json", result_file(all_benches(gemm_tokens=GEMM_TOKENS, factors={"gemm": 1.1})))
    base = ["impact", str(baseline), str(cand), "--steps", "0-1", "--json"]
    runs = {}
    for name, extra in (("default", []), ("fp8", ["--rollout-precision", "fp8"]), ("tp8", ["--rollout-tp", "8"]),
                        ("set", ["--set", "actor_rollout_ref.rollout.quantization=fp8"])):
        assert main(base + extra) == 0
        runs[name] = json.loads(capsys.readouterr().out)
    gen = {k: v["stages"]["gen"]["change_s"] for k, v in runs.items()}
    assert 0 <= gen["fp8"] < gen["default"]
    assert runs["set"]["stages"] == runs["fp8"]["stages"]
    assert runs["tp8"]["baseline"]["step_s"] != runs["default"]["baseline"]["step_s"]
    # the run's checks are estimate's: expert parallelism on the dense default model is one line, exit 2
    assert main(base + ["--strategy", "megatron", "--train-ep", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "polytrace: error: --train-ep 2: qwen2.5-32b is a dense model, it has no experts to split"
