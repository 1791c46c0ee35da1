"""Multi-turn (agent loop) runs: the agent-loop metrics, the pricing of tool waits and per-turn
prefill, and "calibrate early, predict late" on a run whose responses grow 4x."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _settings_logs import growing_log, mean_response

from polytrace.calibrate.fit import StepData, fit
from polytrace.calibrate.validate import Overrides, validate
from polytrace.logs.agent import agent_step
from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.stepmodel.efficiency import DEFAULT
from polytrace.stepmodel.rollout import GENERATED_SHARE_PRIOR, multiturn_rollout, simulate_rollout, tool_prefill_seconds


def test_agent_metrics_read_as_verl_logs_them():
    s = agent_step({"num_turns/mean": 6.0, "timing_s/agent_loop/slowest/tool_calls": 9.5,
                    "timing_s/agent_loop/tool_calls/max": 12.0, "timing_s/agent_loop/tool_calls/mean": 1.5})
    assert s.requests == 3.0 and s.tool_calls == 2.0  # 2k + 2 turns: k + 1 requests, k tool calls
    assert s.tool_wait_s == 9.5 and s.tool_wait_source == "agent_loop/slowest/tool_calls"
    assert s.multiturn
    older = agent_step({"timing/agent_loop/tool_calls/max": 4.0, "tool_call_counts/mean": 1.2})
    assert older.tool_wait_s == 4.0 and older.tool_calls == 1.2 and older.requests is None
    assert agent_step({"response_length/mean": 100.0}) is None
    assert not agent_step({"num_turns/mean": 2.0}).multiturn  # one request, no tools: a single turn
    assert agent_step({"timing_s/agent_loop/slowest/tool_calls": float("nan")}) is None


def test_multiturn_rollout_decodes_the_generated_share_and_prefills_the_rest():
    model, gpu = get_model("qwen2.5-3b"), get_gpu("a100-80g")
    p = np.full(64, 300)
    r = np.full(64, 2000)
    roll, prefill = multiturn_rollout(model, gpu, p, r, generated_share=1.0, n_gpus=4)
    plain = simulate_rollout(model, gpu, p, r, n_gpus=4)
    assert prefill == 0.0 and roll.time_s == pytest.approx(plain.time_s, rel=1e-12)
    roll, prefill = multiturn_rollout(model, gpu, p, r, generated_share=0.25, n_gpus=4)
    assert roll.iterations == 500
    # 1,500 tool tokens per trajectory, 16 trajectories per engine, each attending to 300 + 1,000 tokens
    flops = 16 * 1500 * (model.matmul_flops_per_token() + model.attn_flops_per_pair * 1300)
    assert prefill == pytest.approx(flops / (gpu.ceiling("bf16") * DEFAULT.prefill), rel=1e-9)
    assert tool_prefill_seconds(model, gpu, 1, p, r, np.zeros(64), 4) == 0.0


def test_fit_takes_tool_waits_as_priced():
    rows = []
    for i in range(10):
        v = 10.0 + i
        wait = 5.0 + (i % 3)
        rows.append(StepData(i, {}, {"gen": 2.0 * v + wait, "step": 2.0 * v + wait + 1.0}, {},
                             x={"gen": {"rollout": v, "tool": wait}}))
    cal = fit(rows, ["gen"])
    pred = cal.predict(rows[-1], ["gen"])["gen"]
    assert pred == pytest.approx(rows[-1].actual["gen"], rel=0.02)
    assert cal.slowdown["rollout"] == pytest.approx(2.0, rel=0.1)


def _late_accuracy(res, path) -> dict:
    from polytrace.logs import read_log

    mean_r = {s.step: s.metrics["response_length/mean"] for s in read_log(path).steps}
    window = np.mean([mean_r[s] for s in res.calibration["steps"]])
    late = [r for r in res.per_step if mean_r[r["step"]] >= 2 * window]
    assert len(late) >= 10
    out = {}
    for k in res.stages + ["step"]:
        a = np.array([r["actual"][k] for r in late])
        p = np.array([r["predicted"][k] for r in late])
        out[k] = float(100 - 100 * np.mean(np.abs(p - a) / a))
    return out


@pytest.fixture(scope="module")
def multiturn_run(tmp_path_factory):
    path = growing_log(tmp_path_factory.mktemp("mt") / "multiturn.log", remove_padding=True, multiturn=True,
                       steps=40)
    return path, validate(path, calibrate_steps=10, overrides=Overrides())


def test_multiturn_run_calibrated_early_predicts_late_steps(multiturn_run):
    path, res = multiturn_run
    assert mean_response(40, 40) / mean_response(1, 40) > 4
    assert res.config["remove_padding"] is True  # unstated in the log, inferred from the window
    assert any(n.startswith("multi-turn:") and "slowest trajectory" in n for n in res.notes)
    late = _late_accuracy(res, path)
    assert min(late.values()) >= 90.0, late


def test_tool_waits_are_in_the_prediction(multiturn_run, tmp_path):
    """The same run with its agent-loop metrics taken out predicts late generation worse: the
    tool waits and per-turn prefill are what carries it."""
    path, res = multiturn_run
    text = open(path).read()
    import re

    bare = re.sub(r" - (num_turns|timing_s/agent_loop)/[\w/]+:[0-9.]+", "", text)
    assert "agent_loop" not in bare
    (tmp_path / "bare.log").write_text(bare)
    res_bare = validate(tmp_path / "bare.log", calibrate_steps=10, overrides=Overrides())
    late, late_bare = _late_accuracy(res, path), _late_accuracy(res_bare, tmp_path / "bare.log")
    assert late["gen"] > late_bare["gen"] + 3.0, (late, late_bare)
    assert GENERATED_SHARE_PRIOR == pytest.approx(0.162, abs=1e-3)


def test_estimate_prefills_the_tool_output_of_a_multiturn_profile():
    import dataclasses

    from polytrace.stepmodel.estimate import build_config, estimate_step
    from polytrace.workload.profiles import get_profile

    prof = get_profile("search-r1-7b")
    cfg = build_config(prof, "qwen2.5-7b", "h100", 8, rollout_tp=2)
    batch = prof.sample(step=0, seed=0, prompts=64)
    multi = estimate_step(cfg, batch)
    single = estimate_step(cfg, dataclasses.replace(batch, turns=None, loss_lens=None))
    p = np.asarray(batch.prompt_lens)
    r = np.minimum(np.asarray(batch.response_lens), cfg.max_response_len)
    decoded = np.minimum(np.asarray(batch.loss_lens), r)
    tool = tool_prefill_seconds(cfg.model, cfg.gpu, cfg.rollout_tp, p, r, r - decoded, cfg.n_gpus)
    assert tool > 0
    # the prompts' prefill is the same on both sides; the tool output's is added on the multi-turn one
    assert multi["kernels"]["gen"]["prefill"] - single["kernels"]["gen"]["prefill"] == pytest.approx(tool, rel=1e-9)
    assert multi["kernels"]["gen"]["tool"] > 0


# ---- the generated share measured on the run's own validation trajectories ----------------------

TOOL_TURN = "user\n<tool_response>\nx = 42\n</tool_response>\nassistant\n"


def _table(path, outputs, step_column=10):
    """A wandb generations table as verl's ``log_val_generations`` writes it."""
    import json

    cols = ["step"]
    row = [step_column]
    for k, text in enumerate(outputs, start=1):
        cols += [f"input_{k}", f"output_{k}", f"score_{k}"]
        row += ["system\nuser\nquestion\nassistant\n", text, 1.0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"columns": cols, "data": [row]}))


def test_the_generated_share_is_measured_on_the_latest_readable_table(tmp_path):
    """Tool turns (``user <tool_response> ... </tool_response> assistant``, hermes format with its
    special tokens stripped) against the rest of each output, in characters, on the latest
    validation table that reads; the ones passed over named in one note."""
    from polytrace.logs.generations import measure_generated_share

    tables = tmp_path / "files" / "media" / "table" / "val"
    text = "reasoning " * 90 + TOOL_TURN + "the answer is 42"
    _table(tables / "generations_9_aaa.table.json", [text, "no tools here"])
    _table(tables / "generations_4_bbb.table.json", [TOOL_TURN * 5])  # older: passed by
    (tables / "generations_19_ccc.table.json").write_text('{"columns": ["step", "out')  # cut short
    _table(tables / "generations_14_ddd.table.json", [])  # no output columns
    notes: list[str] = []
    m = measure_generated_share(tmp_path / "files", notes)
    total = len(text) + len("no tools here")
    assert m.share == pytest.approx(1.0 - len(TOOL_TURN) / total, rel=1e-12)
    assert m.source.endswith("generations_9_aaa.table.json") and m.trajectories == 2 and m.tool_turns == 1
    assert len(notes) == 1 and "generations_19_ccc" in notes[0] and "generations_14_ddd" in notes[0]
    assert measure_generated_share(tmp_path / "elsewhere", notes) is None and len(notes) == 1
    # an opening tag without its closing one ends the count (the turns before it stand)
    from polytrace.logs.generations import tool_turn_chars

    assert tool_turn_chars("a" + TOOL_TURN + "b <tool_response> cut") == (len(TOOL_TURN), 1)
    assert tool_turn_chars("<tool_response>" * 1000) == (0, 0)
    assert tool_turn_chars("<tool_response>x</tool_response>") == (len("<tool_response>x</tool_response>"), 1)


def test_a_code_tool_run_is_priced_with_its_measured_share(tmp_path):
    """A run whose tools append little (90% of its response tokens generated, as a code sandbox's
    short outputs leave): without tables its steps are priced at the Search-R1 prior (16.2%
    decoded); with the share measured on its wandb folder's validation table, at 90%: the same
    pricing (``multiturn_rollout``) with the measured share, so the generation's modelled work
    grows."""
    from polytrace.calibrate.validate import prepare, step_batch

    folder = tmp_path / "wandb" / "run-1"
    log = folder / "files" / "output.log"
    log.parent.mkdir(parents=True)
    growing_log(log, remove_padding=True, multiturn=True, steps=20, generated_share=0.9)
    _, run_prior, notes_prior, rows_prior, _ = prepare(folder, Overrides())
    assert run_prior.generated_share is None
    assert any("Search-R1 trace's generated share" in n for n in notes_prior)
    text = "r" * (9 * len(TOOL_TURN)) + TOOL_TURN  # 10% of each output's characters are tool turns
    _table(folder / "files" / "media" / "table" / "val" / "generations_9_abc.table.json", [text] * 4)
    _, run, notes, rows, _ = prepare(folder, Overrides())
    assert run.generated_share == pytest.approx(0.9, rel=1e-12)
    assert any("measured on 4 validation trajectories with 4 tool turns" in n for n in notes)
    row, row_prior = rows[5], rows_prior[5]
    p, r = step_batch(run, row.stats)
    roll, prefill = multiturn_rollout(run.engine_model, run.gpu, p, r, generated_share=0.9, n_gpus=run.n_gpus,
                                      engine=run.rollout_settings)
    assert row.x["gen"]["rollout"] == pytest.approx(roll.time_s + prefill, rel=1e-9)
    assert row.x["gen"]["rollout"] > 2.0 * row_prior.x["gen"]["rollout"]


def test_zero_shot_reads_a_multiturn_run_folder(tmp_path):
    """``validate --zero-shot`` on a wandb run folder of a multi-turn run: the log file inside is
    hashed (the folder was: an IsADirectoryError), and each step's tool wait is added as logged
    (the priors have no kind for it: a KeyError)."""
    from polytrace.calibrate.priors import predict_log
    from polytrace.calibrate.zeroshot import zero_shot

    folder = tmp_path / "run-2"
    log = folder / "files" / "output.log"
    log.parent.mkdir(parents=True)
    growing_log(log, remove_padding=True, multiturn=True, steps=20)
    res = zero_shot(folder, overrides=Overrides())
    gen = res.accuracy["gen"]
    assert res.steps >= 15 and 0.5 <= gen["ratio"] <= 2.0, gen
    # the priors' prediction of gen carries each step's tool wait once, unscaled
    from polytrace.calibrate.corpus import Corpus
    from polytrace.calibrate.priors import KINDS
    from polytrace.calibrate.validate import _timed_stages, prepare
    from polytrace.stepmodel.efficiency import load_priors

    _, run, _, rows, _ = prepare(folder, Overrides())
    stages, rows = _timed_stages(rows, len(rows))
    corpus = Corpus("run-2", rows, stages, run.eager, run.gradient_checkpointing, "")
    x, _b, _y, _other, fixed = corpus.matrices(list(KINDS), rows)
    waits = np.array([r.families["gen"][("tool", "tool")] for r in rows])
    assert waits.min() > 5.0 and np.allclose(fixed["gen"], waits)
    doc = load_priors()
    with_waits = predict_log(doc, corpus)["gen"]
    rows_bare = [dataclasses.replace(r, families={**r.families, "gen": {k: v for k, v in r.families["gen"].items()
                                                                        if k[0] != "tool"}}) for r in rows]
    bare = predict_log(doc, Corpus("run-2", rows_bare, stages, run.eager, run.gradient_checkpointing, ""))["gen"]
    assert np.allclose(with_waits - bare, waits)


def test_calibrate_reads_a_run_folder_and_records_its_logs_hash(tmp_path):
    """``polytrace calibrate`` on a wandb run folder: the file recorded is the log read inside it
    (hashing the folder was an IsADirectoryError), and the measured share travels in the config."""
    import json

    from polytrace.calibrate.files import calibrate_from_log
    from polytrace.provenance import file_sha256

    folder = tmp_path / "run-3"
    log = folder / "files" / "output.log"
    log.parent.mkdir(parents=True)
    growing_log(log, remove_padding=True, multiturn=True, steps=20)
    _table(folder / "files" / "media" / "table" / "val" / "generations_9_abc.table.json",
           ["r" * (3 * len(TOOL_TURN)) + TOOL_TURN])
    calibrate_from_log(folder, tmp_path / "cal.json")
    doc = json.loads((tmp_path / "cal.json").read_text())
    assert doc["source"]["sha256"] == file_sha256(log)
    assert doc["config"]["generated_share"] == pytest.approx(0.75, rel=1e-12)


def test_estimate_takes_a_stated_generated_share_for_a_multiturn_profile(capsys):
    """``--generated-share``: a multi-turn profile's responses decoded at the stated share (a code
    sandbox's ~0.95 where the Search-R1 trace holds ~0.16), the rest prefilled as tool output; on a
    single-turn profile, or outside (0, 1], a one-line error."""
    from polytrace.cli import main
    from polytrace.stepmodel.estimate import build_config, estimate_step
    from polytrace.workload.profiles import get_profile

    prof = get_profile("search-r1-7b")
    batch = prof.sample(step=0, seed=0, prompts=64)
    trace = estimate_step(build_config(prof, "qwen2.5-7b", "h100", 8, rollout_tp=2), batch)
    cfg = build_config(prof, "qwen2.5-7b", "h100", 8, rollout_tp=2, generated_share=0.95)
    stated = estimate_step(cfg, batch)
    p = np.asarray(batch.prompt_lens)
    r = np.minimum(np.asarray(batch.response_lens), cfg.max_response_len)
    decoded = np.maximum(np.round(r * 0.95).astype(np.int64), 1)
    tool = tool_prefill_seconds(cfg.model, cfg.gpu, cfg.rollout_tp, p, r, r - decoded, cfg.n_gpus)
    single = estimate_step(cfg, dataclasses.replace(batch, turns=None, loss_lens=None))
    assert stated["kernels"]["gen"]["prefill"] - single["kernels"]["gen"]["prefill"] == pytest.approx(tool, rel=1e-9)
    assert stated["kernels"]["gen"]["decode"] > 2.0 * trace["kernels"]["gen"]["decode"]
    for extra, expected in ((["--generated-share", "0.5"], "dapo-math-32b is single-turn"),
                            (["--profile", "search-r1-7b", "--generated-share", "0"], "share in (0, 1]")):
        assert main(["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err


def test_a_single_turn_runs_tables_are_not_read(tmp_path):
    """verl's single-turn runs log validation tables too: their split is never priced, so they are
    not parsed (a broken one draws no note)."""
    from polytrace.logs import read_log

    folder = tmp_path / "run-4"
    log = folder / "files" / "output.log"
    log.parent.mkdir(parents=True)
    growing_log(log, remove_padding=True, multiturn=False, steps=5)
    tables = folder / "files" / "media" / "table" / "val"
    tables.mkdir(parents=True)
    (tables / "generations_4_abc.table.json").write_text("{not json")
    read = read_log(folder)
    assert read.generated is None and not any("generation tables" in n for n in read.notes)
    growing_log(log, remove_padding=True, multiturn=True, steps=5)
    read = read_log(folder)
    assert read.generated is None and any("generations_4_abc" in n for n in read.notes)


def test_generated_share_floor_is_what_the_tool_calls_cannot_have_appended():
    """verl cuts a tool's text at 256 characters (+17 of marker) and the hermes turn adds 20
    tokens: 2 calls in 1,000-token responses leave at least 1 - 2 x 293 / 1,000 generated."""
    from polytrace.stepmodel.rollout import generated_share_floor, tool_tokens_max

    assert tool_tokens_max() == 293 and tool_tokens_max(1000) == 1037
    assert generated_share_floor(2.0, 1000.0) == pytest.approx(1 - 2 * 293 / 1000, rel=1e-12)
    assert generated_share_floor(2.0, 3000.0, 512) == pytest.approx(1 - 2 * 549 / 3000, rel=1e-12)
    assert generated_share_floor(0.0, 1000.0) == 1.0  # no call appends nothing
    assert generated_share_floor(10.0, 1000.0) == 0.0  # the calls could fill the responses
    assert generated_share_floor(1.0, 0.0) == 0.0


def test_slowest_trajectory_without_tools_decodes_its_whole_response():
    """The log's slowest trajectory waited on no tool: its logged response is all generated, so the
    engine decodes it whole however small the share (the horizon is its length)."""
    from polytrace.calibrate.multiturn import slowest_generated

    model, gpu = get_model("qwen2.5-3b"), get_gpu("a100-80g")
    p, r = np.full(16, 300), np.array([2000] * 15 + [4000])
    roll, _ = multiturn_rollout(model, gpu, p, r, generated_share=0.25, n_gpus=1)
    assert roll.iterations == 1000
    roll, _ = multiturn_rollout(model, gpu, p, r, generated_share=0.25, n_gpus=1, slowest_generated=3500)
    assert roll.iterations == 3500
    roll, _ = multiturn_rollout(model, gpu, p, r, generated_share=0.25, n_gpus=1, slowest_generated=9000)
    assert roll.iterations == 4000  # never more than the response itself
    m = {"num_turns/mean": 6.0, "timing_s/agent_loop/slowest/tool_calls": 0.0,
         "timing_s/agent_loop/slowest/response_length": 3500}
    assert agent_step(m).slowest_response == 3500.0 and slowest_generated(agent_step(m)) == 3500
    assert slowest_generated(agent_step({**m, "timing_s/agent_loop/slowest/tool_calls": 0.4})) == 0
    assert slowest_generated(agent_step({k: v for k, v in m.items() if "slowest/tool" not in k})) == 0
