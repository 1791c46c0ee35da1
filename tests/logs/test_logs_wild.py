"""Logs in the wild: launch scripts in fences, with continuations, variables and comments; the
common entry points; values inferred from metrics; and the reader's boundary checks (issues 13
and 17). Logs are built here (``_verl_logs``), never copied from elsewhere."""

from __future__ import annotations

import os
import re
import signal
from contextlib import contextmanager

import pytest
from _verl_logs import Run, step_line, step_records, write_log

from polytrace.calibrate.logconfig import Overrides, config_from_log, guess_model
from polytrace.calibrate.validate import validate
from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.logs import Unresolved, parse_overrides, read_log
from polytrace.logs.script import Shell, run_script
from polytrace.logs.shell_lines import logical_lines

SMALL = dict(steps=14, prompts=32, n=4, max_response=256, max_prompt=256, micro_per_gpu=4, mini_batch=16)


@contextmanager
def no_hang(seconds: int = 60):
    """A hang (a quadratic regex, a blocking read) becomes a failure instead of a stuck CI job.
    Not a timing assertion: the work takes milliseconds; the guard is 1000x that."""
    def fail(*_):
        raise AssertionError(f"did not finish in {seconds} s")
    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --- launch scripts ------------------------------------------------------------------------------


def test_markdown_script_with_variables_continuations_and_comments(tmp_path):
    """The issue's case: a fenced script, ``\\`` continuations, ``MODEL_PATH=...`` then
    ``$MODEL_PATH``, ``${TRAIN_BS}``, ``${MAX_PROMPT:-512}``, a commented-out override inside the
    continuation and a trailing comment. Before: 'cannot tell the model from the log'."""
    run = Run(**SMALL, model_path="Qwen/Qwen2.5-7B-Instruct", gpus_per_node=4, nnodes=2, rollout_tp=2)
    log = read_log(write_log(tmp_path / "run.log", run))
    c = log.config
    assert log.entry == "verl.trainer.main_ppo" and log.mode == "sync"
    assert c["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert c["data.train_batch_size"] == 32  # ${TRAIN_BS}
    assert c["data.max_prompt_length"] == 256  # ${MAX_PROMPT:-256}: MAX_PROMPT unset, the default
    assert c["trainer.n_gpus_per_node"] == 4 and c["trainer.nnodes"] == 2
    assert c["trainer.total_epochs"] == 15  # the trailing '$@ 2>&1 | tee ...  # keep a copy' cut
    assert "actor_rollout_ref.actor.use_dynamic_bsz" not in c  # commented out
    assert isinstance(c["data.train_files"], Unresolved) and c["data.train_files"].names == ("HOME",)
    run_cfg, notes = config_from_log(log, Overrides(gpu="mi300x"))
    assert (run_cfg.model.name, run_cfg.n_gpus, run_cfg.n, run_cfg.rollout_tp) == ("qwen2.5-7b", 8, 4, 2)
    assert not [n for n in notes if n.startswith("inferred")]  # everything was stated


def test_set_x_echoes_and_xtrace_assignments(tmp_path):
    header = ("++ MODEL=/hub/models--deepseek-ai--deepseek-llm-7b-chat/snapshots/abc\n"
              "++ train_files='['\\''/data/a.parquet'\\'', '\\''/data/b.parquet'\\'']'\n"
              "+ python3 -m verl.trainer.main_ppo 'data.train_files=['\\''/data/a.parquet'\\'']' "
              "data.train_batch_size=32 actor_rollout_ref.model.path=/hub/models--deepseek-ai--deepseek-llm-7b-chat"
              "/snapshots/abc actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=8 "
              "'trainer.logger=[console,wandb]'\n")
    log = read_log(write_log(tmp_path / "x.log", Run(**SMALL), header=header))
    assert log.variables["train_files"] == "['/data/a.parquet', '/data/b.parquet']"
    assert log.config["data.train_files"] == ["/data/a.parquet"]
    assert log.config["trainer.logger"] == ["console", "wandb"]
    run, _ = config_from_log(log)
    assert run.model.name == "deepseek-llm-7b"  # HF hub cache path -> the preset


@pytest.mark.parametrize("launcher, entry, mode", [
    ("python3 -m verl.trainer.main_ppo", "verl.trainer.main_ppo", "sync"),
    ("python3 -m recipe.dapo.main_dapo", "recipe.dapo.main_dapo", "sync"),
    ("ray job submit --address=http://127.0.0.1:8265 --runtime-env=verl/trainer/runtime_env.yaml -- "
     "python3 -m recipe.dapo.main_dapo", "recipe.dapo.main_dapo", "sync"),
    ("python3 -m recipe.one_step_off_policy.main_ppo", "recipe.one_step_off_policy.main_ppo", "one-step-off"),
    ("python -m recipe.fully_async_policy.fully_async_main", "recipe.fully_async_policy.fully_async_main",
     "fully-async"),
    ("torchrun --nproc_per_node 8 verl/trainer/main_ppo.py", "verl/trainer/main_ppo.py", "sync"),
    ("bash examples/grpo_trainer/run_qwen2_5-7b.sh", "", "sync"),
])
def test_entry_points(tmp_path, launcher, entry, mode):
    header = (f"(TaskRunner pid=7) {launcher} data.train_batch_size=32 "
              "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct trainer.n_gpus_per_node=8\n")
    log = read_log(write_log(tmp_path / "e.log", Run(**SMALL), header=header))
    assert log.config["data.train_batch_size"] == 32
    assert (log.entry, log.mode) == (entry, mode)


def test_shell_expansion_forms():
    sh = Shell()
    commands, sh = run_script(logical_lines([
        "export GPUS=8", "NODES=2 # two nodes", 'BASE="/models"', "MODEL=${BASE}/Qwen2.5-7B",
        "TOTAL=$((GPUS * NODES))", "EXTRA='a.b=1 c.d=2'", ": ${SET_HERE:=42}",
        "python3 -m verl.trainer.main_ppo x.gpus=$TOTAL x.model=$MODEL x.alt=${UNSET:-fallback} "
        "x.plus=${GPUS:+yes} x.quoted='$GPUS' x.escaped=\\$GPUS $EXTRA x.pos=$1 x.cmd=`hostname`"]))
    words = commands[-1].words
    assert "x.gpus=16" in words and "x.model=/models/Qwen2.5-7B" in words
    assert "x.alt=fallback" in words and "x.plus=yes" in words
    assert "x.quoted=$GPUS" in words and "x.escaped=$GPUS" in words
    assert "a.b=1" in words and "c.d=2" in words  # an unquoted variable splits into words
    assert sh.vars["SET_HERE"] == "42"
    pos = [w for w in words if isinstance(w, Unresolved)]
    assert [w.text for w in pos] == ["x.pos=$1", "x.cmd=`hostname`"]


def test_assignment_values_are_expanded_but_never_split():
    commands, sh = run_script(logical_lines([
        "EXTRA='a.b=1 c.d=2'", "BOTH=$EXTRA", 'BOTH+=" e.f=3"', "MODEL=$UNSET/Qwen2.5-7B",
        "python3 -m verl.trainer.main_ppo $BOTH"]))
    assert sh.vars["BOTH"] == "a.b=1 c.d=2 e.f=3"  # one value, as bash keeps it
    assert isinstance(sh.vars["MODEL"], Unresolved) and sh.vars["MODEL"].names == ("UNSET",)
    assert sh.vars["MODEL"].text == "$UNSET/Qwen2.5-7B"
    assert commands[-1].words[-3:] == ["a.b=1", "c.d=2", "e.f=3"]  # used unquoted, it splits


def test_grouped_overrides_for_a_wrapper_script():
    ov = dict(parse_overrides('bash run.sh "trainer.n_gpus_per_node=1 data.max_response_length=256 '
                              "trainer.logger=['console']\""))
    assert ov == {"trainer.n_gpus_per_node": 1, "data.max_response_length": 256, "trainer.logger": ["console"]}


# --- inference from the metrics -----------------------------------------------------------------


def test_unstated_values_are_inferred_from_metrics_and_said(tmp_path, capsys):
    run = Run(**{**SMALL, "n": 5})
    header = ("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B "
              "data.train_batch_size=32\n")
    path = write_log(tmp_path / "i.log", run, header=header)
    cfg, notes = config_from_log(read_log(path), Overrides(gpu="mi300x"))
    assert (cfg.n_gpus, cfg.n, cfg.max_response_len) == (8, 5, 256)
    text = "\n".join(notes)
    assert "inferred: 8 GPUs from perf/total_num_tokens / (perf/throughput x step time)" in text
    assert "inferred: responses per prompt n = 5" in text
    assert "inferred: max response length 256 from response_length/max on steps with" in text
    assert main(["validate", path, "--gpu", "mi300x"]) == 0
    assert "note: inferred: 8 GPUs" in capsys.readouterr().out


def test_gpu_count_from_tokens_per_rank_and_prompts_from_n(tmp_path):
    recs = step_records(Run(**SMALL))
    for r in recs:
        del r["metrics"]["perf/throughput"]
    header = ("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B "
              "actor_rollout_ref.rollout.n=4\n")
    cfg, notes = config_from_log(read_log(write_log(tmp_path / "g.log", Run(**SMALL), header=header, records=recs)))
    assert (cfg.n_gpus, cfg.prompts_per_step) == (8, 32)
    assert any("global_seqlen/mean" in n for n in notes)


@pytest.mark.parametrize("name, preset", [
    ("deepseek-ai/deepseek-llm-7b-chat", "deepseek-llm-7b"), ("Qwen/Qwen2.5-Math-7B", "qwen2.5-7b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "qwen2.5-1.5b"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3.1-8b"), ("/ckpt/Qwen2.5-3B-Instruct-GRPO/actor", "qwen2.5-3b"),
    ("/ckpt/Qwen3-4B-SFT/step_200", "qwen3-4b"), ("Qwen/Qwen3-3B", None), ("some/model", None),
])
def test_model_names_from_hf_paths(name, preset):
    spec = guess_model(name)
    assert (spec.name if spec else None) == preset


# --- bad input: one-line errors naming what to pass -----------------------------------------------


@pytest.mark.parametrize("override, key, flag", [
    ("data.train_batch_size=abc", "data.train_batch_size", "--prompts"),
    ("data.train_batch_size=[1,2]", "data.train_batch_size", "--prompts"),
    ("data.train_batch_size=1e308", "data.train_batch_size", "--prompts"),
    ("trainer.n_gpus_per_node=two", "trainer.n_gpus_per_node", "--gpus"),
    ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n", "--n"),
    ("actor_rollout_ref.rollout.n=nan", "actor_rollout_ref.rollout.n", "--n"),
    ("trainer.nnodes=0", "trainer.nnodes", "--gpus"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization=0", "gpu_memory_utilization", "(0, 1]"),
    ("data.max_response_length=1000000000", "data.max_response_length", "--max-response-len"),
    ("trainer.n_gpus_per_node=$NGPUS", "NGPUS is never assigned", "--gpus"),
])
def test_bad_config_values_are_one_line_errors(tmp_path, capsys, override, key, flag):
    header = ("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B "
              f"data.train_batch_size=32 trainer.n_gpus_per_node=8 {override}\n")
    path = write_log(tmp_path / "bad.log", Run(**SMALL), header=header)
    with pytest.raises(PolytraceError, match="line 1") as exc:
        config_from_log(read_log(path))
    assert key in str(exc.value) and flag in str(exc.value)
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("polytrace: error:") and "\n" not in err and key in err


def test_conflicting_duplicate_steps_and_two_runs_are_errors(tmp_path):
    recs = step_records(Run(**SMALL))
    path = write_log(tmp_path / "dup.log", Run(**SMALL), records=recs + recs[:2])
    assert len(read_log(path).steps) == len(recs)  # the same lines again: one step each
    second = step_records(Run(**{**SMALL, "seed": 9}))  # a second run, steps restarting at 1
    mixed = write_log(tmp_path / "mixed.log", Run(**SMALL), records=recs + second)
    with pytest.raises(PolytraceError, match=r"step 1 is logged again .*line \d+ had .*mixes two runs"):
        read_log(mixed)
    csv = tmp_path / "two.csv"
    csv.write_text("Step,runA - timing_s/gen,runB - timing_s/gen\n1,10,11\n")
    with pytest.raises(PolytraceError, match="mixes two runs"):
        read_log(csv)


def test_unusable_step_values_are_left_out_and_named(tmp_path):
    """Zero, negative, NaN and infinite timings, and lengths past the cap (a response_length/max
    of 1e9 would have sized the simulation), leave their step out, said so; never a traceback."""
    run = Run(**SMALL)
    recs = step_records(run)
    bad = {2: ("timing_s/gen", float("nan")), 3: ("timing_s/update_actor", 0.0), 4: ("timing_s/ref", -1.0),
           5: ("timing_s/old_log_prob", float("inf")), 6: ("response_length/max", 1e9)}
    for step, (key, value) in bad.items():
        recs[step - 1]["metrics"][key] = value
    with no_hang():
        res = validate(write_log(tmp_path / "v.log", run, records=recs), overrides=Overrides(gpu="mi300x"),
                       calibrate_steps=5)
    note = next(n for n in res.notes if n.startswith("left out"))
    assert "5 step(s)" in note and "timing gen is not a number" in note and "timing update_actor is 0" in note
    assert "timing old_log_prob is infinite" in note and "timing ref is -1" in note
    # a non-finite value is named in words: the note holds no "nan" or "inf" a scan for them would find
    assert not re.search(r"(?<![\w.])-?(nan|inf)(?!\w)", note, re.IGNORECASE), note
    assert "response_length/max 1e+09 is above the response cap 256" in note
    used = set(res.calibration["steps"]) | {lo["step"] for lo in res.calibration["left_out"]}
    assert used == {1, 7, 8, 9, 10}  # the first five usable steps: 2-6 never reach the fit
    for r in recs:
        r["metrics"]["timing_s/gen"] = float("nan")
    with pytest.raises(PolytraceError, match="no usable step"):
        validate(write_log(tmp_path / "w.log", run, records=recs))


def test_long_lines_and_deep_nesting_do_not_hang_or_crash(tmp_path):
    run = Run(**SMALL)
    path = tmp_path / "long.log"
    write_log(path, run)
    with open(path, "a") as fh:
        fh.write("a" * 900_000 + " Config {\n")  # quadratic under the old '\w+Config \{' search
        fh.write("x" * 8_000_000 + "\n")  # an 8 MB line
        fh.write("python3 -m verl.trainer.main_ppo a.b=" + "[" * 100_000 + "\n")
        fh.write("(TaskRunner pid=1) step:999999999999999 - timing_s/gen:1\n")  # not a step number
    with no_hang():
        log = read_log(path)
    assert len(log.steps) == SMALL["steps"]
    assert any("longer than 1,000,000 characters" in n for n in log.notes)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_not_read(tmp_path):
    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)
    with no_hang(), pytest.raises(PolytraceError, match="not a regular file"):
        read_log(fifo)


def test_step_line_format_round_trip(tmp_path):
    """The fixture's step lines read back exactly (a guard for every test above)."""
    recs = step_records(Run(**SMALL))
    path = tmp_path / "r.log"
    path.write_text("".join(step_line(r["step"], r["metrics"]) for r in recs))
    log = read_log(path)
    assert [s.step for s in log.steps] == [r["step"] for r in recs]
    assert log.steps[0].timings["gen"] == pytest.approx(recs[0]["metrics"]["timing_s/gen"], abs=1e-3)


def test_fully_async_trainer_config(tmp_path):
    """A fully async run states train_batch_size 0 and separate trainer and rollout pools."""
    header = ("python -m recipe.fully_async_policy.fully_async_main data.train_batch_size=0 "
              "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct actor_rollout_ref.actor.ppo_mini_batch_size=16 "
              "async_training.require_batches=2 actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=4 "
              "rollout.n_gpus_per_node=4 async_training.staleness_threshold=0.5\n")
    log = read_log(write_log(tmp_path / "fa.log", Run(**SMALL), header=header))
    run, notes = config_from_log(log, Overrides(gpu="mi300x"))
    assert log.mode == "fully-async" and (run.prompts_per_step, run.n_gpus) == (32, 8)
    assert any("2 x ppo_mini_batch_size 16 = 32" in n for n in notes)


def test_printed_config_on_one_line_and_other_dicts_passed_over(tmp_path):
    """An unsorted config printed on one line (a recipe's print), after some other dict print."""
    header = ("(WorkerDict pid=3) {'data': 1, 'x': 2}\n"
              "(TaskRunner pid=2) {'data': {'train_batch_size': 32, 'max_response_length': 256}, "
              "'trainer': {'n_gpus_per_node': 8, 'nnodes': 1}, 'actor_rollout_ref': {'model': "
              "{'path': 'Qwen/Qwen2.5-0.5B-Instruct'}, 'rollout': {'n': 4}}}\n")
    log = read_log(write_log(tmp_path / "p.log", Run(**SMALL), header=header))
    assert log.printed["data.train_batch_size"] == 32 and log.printed["actor_rollout_ref.rollout.n"] == 4
    run, _ = config_from_log(log, Overrides(gpu="mi300x"))
    assert (run.model.name, run.n_gpus, run.prompts_per_step, run.n) == ("qwen2.5-0.5b", 8, 32, 4)


def test_progress_bar_carriage_returns(tmp_path):
    """tqdm redraws with bare carriage returns, so a step line can share a physical line with a
    progress bar; line numbers in errors count newlines only, as editors do."""
    recs = step_records(Run(**SMALL))
    body = "".join("Training Progress:  3%|▎ | 3/100 [00:10<05:00]\r" + step_line(r["step"], r["metrics"])
                   for r in recs)
    path = tmp_path / "tqdm.log"
    path.write_text("python3 -m verl.trainer.main_ppo data.train_batch_size=32\n" + body + body.replace(
        "timing_s/gen:", "timing_s/gen:9", 1))
    with pytest.raises(PolytraceError, match=rf"tqdm.log:{len(recs) + 2}: step 1 is logged again .*line 2 had"):
        read_log(path)
    path.write_text("python3 -m verl.trainer.main_ppo data.train_batch_size=32\n" + body)
    log = read_log(path)
    assert len(log.steps) == len(recs) and log.steps[-1].metrics["perf/throughput"] > 0


def test_another_ray_cluster_on_the_node_is_a_note(tmp_path, capsys):
    """Ray's start-up warning that the node already runs another Ray cluster is read as a note
    naming its line, in ``validate``'s output too: a job sharing the node loads stage times that
    nothing logged measures. Absent the warning, no note; the warning inside a step line's
    metrics or a launch argument is not Ray's."""
    run = Run(**SMALL)
    warning = ("2025-06-18 16:49:37,692\tWARNING services.py:411 -- Found multiple active Ray instances: "
               "{'10.1.2.3:58733', '10.1.2.3:6379'}. Connecting to latest cluster at 10.1.2.3:6379.\n")
    header = ("python3 -m verl.trainer.main_ppo data.train_batch_size=32 actor_rollout_ref.rollout.n=4 "
              "data.max_response_length=256 data.max_prompt_length=256 trainer.n_gpus_per_node=8\n")
    path = write_log(tmp_path / "shared.log", run, header=header + warning)
    notes = [n for n in read_log(path).notes if "Ray clusters" in n]
    assert notes == [notes[0]] and notes[0].startswith("line 2: Ray found 2 Ray clusters"), notes
    with no_hang():
        assert main(["validate", path, "--model", "qwen2.5-0.5b", "--gpu", "h100"]) == 0
    assert "line 2: Ray found 2 Ray clusters" in capsys.readouterr().out
    clean = write_log(tmp_path / "alone.log", run, header=header)
    assert not [n for n in read_log(clean).notes if "Ray" in n]
    # a long line holding the words without Ray's braces is no evidence, and does not hang
    odd = write_log(tmp_path / "odd.log", run, header=header + "Found multiple active Ray instances: {"
                    + "x" * 100_000 + "\n")
    with no_hang():
        assert not [n for n in read_log(odd).notes if "Ray clusters" in n]


def test_sizes_from_the_log_are_bounded_before_pricing(tmp_path):
    """Counts that are valid alone but would make pricing run for minutes (or allocate per token
    position) are refused before any step is priced."""
    header = ("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B "
              "data.train_batch_size=32 actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=8 trainer.nnodes=1000\n")
    with no_hang(), pytest.raises(PolytraceError, match="8000 GPUs for 128 sequences per step"):
        validate(write_log(tmp_path / "g.log", Run(**SMALL), header=header))
    header = header.replace("trainer.nnodes=1000", "trainer.nnodes=1").replace("train_batch_size=32",
                                                                                "train_batch_size=400000")
    with no_hang(), pytest.raises(PolytraceError, match="sequences per step, more than 1,048,576"):
        validate(write_log(tmp_path / "s.log", Run(**SMALL), header=header))


# --- notebooks -----------------------------------------------------------------------------------


def _notebook_cell_source(run: Run) -> list[str]:
    """The launch as verl's getting-started notebook writes it: a ``!`` shell escape, an env
    prefix, ``\\`` continuations, and ``$HOME`` in paths; jupyter keeps each line with its newline."""
    adv = "gae" if run.algo == "ppo" else "grpo"
    lines = ["!PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \\",
             f" algorithm.adv_estimator={adv} \\",
             f" data.train_batch_size={run.prompts} \\",
             f" data.max_prompt_length={run.max_prompt} \\",
             f" data.max_response_length={run.max_response} \\",
             f" actor_rollout_ref.model.path=$HOME/models/{run.model_path.split('/')[-1]} \\",
             f" actor_rollout_ref.actor.ppo_mini_batch_size={run.mini_batch} \\",
             f" actor_rollout_ref.rollout.n={run.n} \\",
             f" trainer.n_gpus_per_node={run.gpus_per_node} \\",
             f" trainer.nnodes={run.nnodes} \\",
             " trainer.logger=\\[console\\]"]
    return [ln + "\n" for ln in lines[:-1]] + [lines[-1]]


def _write_notebook(path, cells) -> str:
    import json
    doc = {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}, "colab": {"gpuType": "T4"}},
           "nbformat": 4, "nbformat_minor": 0}
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)
    return str(path)


def _code_cell(source, output: str) -> dict:
    # jupyter splits a stream's text into lines that keep their newlines
    return {"cell_type": "code", "metadata": {}, "execution_count": 1,
            "source": source if isinstance(source, list) else [source],
            "outputs": [{"name": "stdout", "output_type": "stream", "text": output.splitlines(keepends=True)}]}


def test_notebook_cell_read_as_the_console_log(tmp_path):
    """A run published as a notebook (verl's getting-started tutorial): the cell whose output holds
    the most step lines is the log, its source the launch command (``!`` dropped); a smoke-test
    cell of another model with fewer steps, an install cell and markdown are passed over. Before:
    the JSON was read as text and the model could not be told ('model paths: none')."""
    run = Run(**{**SMALL, "steps": 12}, model_path="Qwen/Qwen2.5-3B-Instruct", gpus_per_node=2)
    smoke = Run(**{**SMALL, "steps": 3}, model_path="Qwen/Qwen2.5-0.5B-Instruct", gpus_per_node=1)
    text = write_log(tmp_path / "main.txt", run, header="") and (tmp_path / "main.txt").read_text()
    smoke_text = write_log(tmp_path / "smoke.txt", smoke, header="") and (tmp_path / "smoke.txt").read_text()
    path = _write_notebook(tmp_path / "tutorial.ipynb", [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Run PPO\n", "step:1 - timing_s/gen:1.0\n"]},
        _code_cell("!pip3 install verl", "Requirement already satisfied: verl\n"),
        _code_cell(_notebook_cell_source(smoke), smoke_text),
        _code_cell(_notebook_cell_source(run), text),
    ])
    log = read_log(path)
    assert [s.step for s in log.steps] == list(range(1, 13))
    c = log.config
    assert c["data.train_batch_size"] == 32 and c["actor_rollout_ref.rollout.n"] == 4
    assert c["trainer.n_gpus_per_node"] == 2
    assert any("notebook cell 4 of 4" in n and "13 step line(s)" in n for n in log.notes)  # step 0: validation only
    # line numbers count the chosen cell's source lines, then its output lines
    source_lines = len(_notebook_cell_source(run))
    output_lines = text.splitlines()
    first = next(i for i, ln in enumerate(output_lines, 1) if "step:1 -" in ln)
    assert log.steps[0].line == source_lines + first
    # the Colab runtime saved with the file is said, not taken as the GPU that ran the cell
    assert any("gpuType 'T4', not read as the GPU" in n for n in log.notes)
    assert not log.devices or "t4" not in str(log.devices).lower()
    run_cfg, notes = config_from_log(log, Overrides(gpu="h100"))
    assert (run_cfg.model.name, run_cfg.n_gpus, run_cfg.prompts_per_step, run_cfg.n) == ("qwen2.5-3b", 2, 32, 4)
    assert any("folder name" in n and "Qwen2.5-3B-Instruct" in n and "$HOME" in n for n in notes)
    # and by content, whatever the file is called
    renamed = tmp_path / "tutorial.json"
    renamed.write_text((tmp_path / "tutorial.ipynb").read_text())
    assert [s.step for s in read_log(renamed).steps] == list(range(1, 13))


@pytest.mark.parametrize("content, says", [
    ('{"cells": [{"cell_type": "code", "source": ["!pip install x"], "outputs": []}]}',
     "no notebook cell printed training step lines"),
    ('{"cells": [', "not a readable Jupyter notebook"),
    ('{"cells": {"a": 1}}', "no 'cells' list"),
])
def test_bad_notebooks_are_one_line_errors(tmp_path, capsys, content, says):
    path = tmp_path / "run.ipynb"
    path.write_text(content)
    with pytest.raises(PolytraceError, match=says):
        read_log(path)
    assert main(["validate", str(path), "--gpu", "h100"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("polytrace: error: ") and str(path) in err[0]


def test_model_folder_name_read_only_when_written_out(tmp_path):
    """``$HOME/models/Qwen2.5-3B-Instruct`` names the model; ``$MODEL_DIR`` or
    ``/ckpt/$RUN`` does not, and stays a one-line error asking for --model."""
    from polytrace.calibrate.identity import resolve_model
    run = Run(**SMALL)
    for path, model in (("$HOME/models/Qwen2.5-3B-Instruct", "qwen2.5-3b"), ("$MODEL_DIR", None),
                        ("/ckpt/$RUN", None)):
        header = ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=32 "
                  f"actor_rollout_ref.model.path={path} trainer.n_gpus_per_node=8\n")
        log = read_log(write_log(tmp_path / "run.log", run, header=header))
        notes: list[str] = []
        if model:
            assert resolve_model(log, None, notes).name == model
            assert "folder name" in notes[-1]
        else:
            with pytest.raises(PolytraceError, match="never assigned.*--model"):
                resolve_model(log, None, notes)
