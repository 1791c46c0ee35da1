"""Formats met in real verl logs gathered for issue 13's goals (none copied here: each case is
rebuilt with ``_verl_logs``): a step timer that leaves validation and checkpoints out (verl 0.5),
values printed as ``np.float64(...)`` (numpy 2), another process's output glued to a step line,
step lines quoted in a markdown blockquote, and a critic that keeps its padding while the actor
removes it."""

from __future__ import annotations

import numpy as np
import pytest
from _verl_logs import Run, step_line, step_records, write_log

from polytrace.calibrate.logconfig import Overrides, config_from_log
from polytrace.calibrate.validate import prepare, validate
from polytrace.logs import read_log
from polytrace.logs.console import _parse_metrics

SMALL = dict(steps=24, prompts=32, n=4, max_response=256, max_prompt=256, micro_per_gpu=4, mini_batch=16,
             test_freq=5, save_freq=10)


def _records_with_step_timer_leaving_extras_out(run: Run) -> list[dict]:
    """verl 0.5: ``timing_s/step`` times the stages only; ``testing`` and ``save_checkpoint``
    are logged beside it."""
    records = step_records(run)
    for r in records:
        m = r["metrics"]
        extra = m.get("timing_s/testing", 0.0) + m.get("timing_s/save_checkpoint", 0.0)
        m["timing_s/step"] -= extra
        m["perf/time_per_step"] = m["timing_s/step"]
    return records


def test_step_timer_that_leaves_validation_out_is_used_as_logged(tmp_path):
    """Before: every validation step's time became its timer minus ~25-40 s of validation and
    checkpointing, far below its own stages (left out, or a step accuracy near 30%)."""
    run = Run(**SMALL)
    records = _records_with_step_timer_leaving_extras_out(run)
    path = write_log(tmp_path / "v05.log", run, records=records)
    _, _, notes, rows, _ = prepare(path, Overrides(gpu="mi300x"))
    logged = {r["step"]: r["metrics"]["timing_s/step"] for r in records}
    checked = [r for r in rows if r.extra]
    assert len(checked) == 4  # steps 5, 10, 15, 20
    for r in checked:
        assert r.actual["step"] == pytest.approx(logged[r.step], abs=1e-3), r.step  # logged to 3 decimals
    assert any("leaves validation and checkpoint seconds out on 4 step(s)" in n for n in notes), notes
    res = validate(path, overrides=Overrides(gpu="mi300x"))
    assert res.accuracy["step"]["accuracy"] > 95.0, res.accuracy["step"]


def test_step_timer_that_holds_validation_still_has_it_taken_out(tmp_path):
    """verl up to 0.4 (and the shared logs): the step timer holds validation and checkpoints;
    they are taken out, and nothing is said about the timer."""
    run = Run(**SMALL)
    records = step_records(run)
    path = write_log(tmp_path / "v04.log", run, records=records)
    _, _, notes, rows, _ = prepare(path, Overrides(gpu="mi300x"))
    by_step = {r["step"]: r["metrics"] for r in records}
    for r in rows:
        if r.extra:
            m = by_step[r.step]
            expect = m["timing_s/step"] - m.get("timing_s/testing", 0.0) - m.get("timing_s/save_checkpoint", 0.0)
            assert r.actual["step"] == pytest.approx(expect, abs=2e-3)
    assert not [n for n in notes if "leaves validation" in n]


@pytest.mark.parametrize("text, key, value", [
    ("timing_s/gen:np.float64(12.5)", "timing_s/gen", 12.5),
    ("critic/vf_loss:np.float64(0.007003280876688223)", "critic/vf_loss", 0.007003280876688223),
    ("actor/lr:np.float32(1e-06)", "actor/lr", 1e-06),
    ("perf/total_num_tokens:np.int64(69484)", "perf/total_num_tokens", 69484.0),
    ("actor/entropy:tensor(0.125)", "actor/entropy", 0.125),
])
def test_numpy_and_torch_scalars_are_read(text, key, value):
    """numpy 2 prints its scalars with their type (``np.float64(0.25)``): verl 0.5 logs many
    metrics so. Before: dropped (a timing printed so made its step unusable)."""
    assert _parse_metrics(f"timing_s/step:9.5 - {text} - response_length/mean:100.0") == {
        "timing_s/step": 9.5, key: value, "response_length/mean": 100.0}


def test_another_process_glued_to_the_last_value_keeps_the_number():
    """ray interleaves processes' output without waiting for a newline: the raylet's disk warning
    lands right after a step line's last value. Before: the value was lost (its key swallowed)."""
    glued = ("timing_s/update_actor:2.004 - timing_s/step:26.566(raylet) [2026-02-28 12:19:29,191 E 12715 12739] "
             "(raylet) file_system_monitor.cc:116: /tmp/ray/session_x is over 95% full, available space: 8.76 GB; "
             "capacity: 177.045 GB. Object creation will fail if spilling is required.")
    assert _parse_metrics(glued) == {"timing_s/update_actor": 2.004, "timing_s/step": 26.566}
    worker = "timing_s/gen:16.22(WorkerDict pid=13763) Flash Attention 2.0 only supports torch.float16"
    assert _parse_metrics(worker) == {"timing_s/gen": 16.22}
    # a value that is not a number, with or without parentheses, is still dropped
    assert _parse_metrics("a:(raylet) x - b:abc(def) - c:1.5") == {"c": 1.5}


def test_log_pasted_in_a_markdown_blockquote(tmp_path):
    """A chat or issue quotes the console with ``> ``: the step lines are read as they are."""
    run = Run(**SMALL)
    text = write_log(tmp_path / "plain.log", run)
    quoted = tmp_path / "quoted.md"
    lines = open(text).read().splitlines()
    quoted.write_text("Here is what the run printed:\n\n" + "\n".join("> " + ln for ln in lines) + "\n")
    a, b = read_log(text), read_log(quoted)
    assert [s.step for s in a.steps] == [s.step for s in b.steps]
    assert a.steps[3].timings == b.steps[3].timings


def test_a_padded_critic_costs_the_same_whatever_the_lengths(tmp_path):
    """The actor removes padding, the critic keeps it (``critic.model.use_remove_padding=False``,
    verl's default for the critic in 0.2-0.4 logs): the critic's passes price every sequence at
    the configured maximum, the actor's at its own length. Before: both priced unpadded, so the
    critic's predicted time followed lengths its real time does not (a real 1.5B log: values and
    critic update 0.94-0.97 s and 3.39-3.44 s over steps whose tokens differed by 30%)."""
    run = Run(**{**SMALL, "algo": "ppo", "resp_start": 200.0, "resp_floor": 60.0})
    path = write_log(tmp_path / "ppo.log", run)
    critic = "    critic.model.path=$MODEL_PATH \\\n"
    text = open(path).read().replace(critic, critic + "    critic.model.use_remove_padding=False \\\n")
    path2 = tmp_path / "ppo_padded_critic.log"
    path2.write_text(text)
    log = read_log(path2)
    cfg, _ = config_from_log(log, Overrides(gpu="mi300x"))
    assert cfg.remove_padding is True and cfg.critic_remove_padding is False

    def spread(path, stage):
        # the forward work itself: at these tiny shapes the pass's collectives and host time
        # ("forward_overhead", the exposed remainder of the gathers it overlaps) outweigh it
        x = np.array([r.x[stage]["forward"] for r in prepare(path, Overrides(gpu="mi300x"))[3]])
        return x.max() / x.min()

    assert spread(path2, "values") < 1.001  # padded: the same work every step
    assert spread(path2, "old_log_prob") > 1.05  # the actor follows the lengths (200 -> 60 tokens)
    # the log without the critic's key: the critic follows the actor's setting (and its lengths)
    cfg0, _ = config_from_log(read_log(path), Overrides(gpu="mi300x"))
    assert cfg0.critic_remove_padding is None
    assert spread(path, "values") > 1.05


def test_step_line_helper_round_trips_wrapped_values(tmp_path):
    """The test fixtures' own step line with a wrapped value reads back (guards the fixture)."""
    line = step_line(3, {"timing_s/gen": 4.5, "response_length/mean": 120.0}, colour=False)
    assert _parse_metrics(line.split("step:3 - ", 1)[1].replace("4.500", "np.float64(4.5)")) == {
        "timing_s/gen": 4.5, "response_length/mean": 120.0}
