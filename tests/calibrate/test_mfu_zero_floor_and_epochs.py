"""verl's printed MFU read at its edges. An MFU of 0 rules devices out only where every one of at
least two steps prints it (``calibrate.mfu.zero_mfu_rules_out``): verl prints 0 for a device its
peak table lacks, on every step; one step at 0 among printed MFUs is a hiccup of that step (or a
device it knows), and a single step is no pattern. Logs written as
tests/calibrate/test_mfu_dialects.py writes them."""

from __future__ import annotations

import pytest
from test_mfu_dialects import PROMPT, RESPONSE, _write

from polytrace.calibrate.logconfig import config_from_log
from polytrace.calibrate.mfu import zero_mfu_rules_out
from polytrace.logs import read_log

LADDER = ("a100-80g", "h100-sxm", "h200", "b200")
TOKENS = 64 * 5 * (PROMPT + RESPONSE)


def _read(path):
    log = read_log(path)
    return log, config_from_log(log)[0]


def test_one_step_at_zero_among_printed_mfus_rules_nothing_out(tmp_path):
    path = tmp_path / "run.log"
    _write(path, "perf/mfu/actor", 0.05, TOKENS, 12, 15.0)
    text = path.read_text().replace("step:3 - perf/mfu/actor:0.050000", "step:3 - perf/mfu/actor:0.000000")
    assert text != path.read_text()
    path.write_text(text)
    log, run = _read(path)
    assert zero_mfu_rules_out(log, run, LADDER) == {}


def test_a_single_step_at_zero_is_no_pattern(tmp_path):
    path = tmp_path / "run.log"
    _write(path, "perf/mfu/actor", 0.0, TOKENS, 1, 15.0)
    log, run = _read(path)
    assert zero_mfu_rules_out(log, run, LADDER) == {}
    _write(path, "perf/mfu/actor", 0.0, TOKENS, 2, 15.0)  # two steps at 0: the pattern, as in test_mfu_dialects
    log, run = _read(path)
    assert "a100-80g" in zero_mfu_rules_out(log, run, LADDER)


def test_a_device_is_ruled_out_from_twice_the_least_printable_mfu(tmp_path):
    """verl prints MFU to 3 decimals: 0 means below 0.0005, so a device on which this update would
    print 0.001 or more is ruled out. The same 7B update over 1/6 of the tokens would print ~0.003
    on an H100 (989 TF): ruled out; over 1/100, ~0.0002: it could have printed 0, kept."""
    import test_mfu_dialects as D

    from polytrace.calibrate.mfu import verl_flops

    path = tmp_path / "run.log"
    for share, ruled_out in ((1 / 6, True), (1 / 100, False)):
        _write(path, "perf/mfu/actor", 0.0, TOKENS * share, 12, 15.0)
        log, run = _read(path)
        seqs, length = 64 * 5, PROMPT + RESPONSE
        mfu = verl_flops(run.model, TOKENS * share, seqs * length * length) / (D.UPDATE * 8) / 1e12 / 989.0
        out = zero_mfu_rules_out(log, run, LADDER)
        assert ("h100-sxm" in out) is ruled_out, (share, mfu, out)
        assert (0.001 <= mfu < 0.01) if ruled_out else mfu < 0.0005, mfu


def test_the_mfu_peak_counts_every_ppo_epoch(tmp_path, monkeypatch):
    """verl's MFU divides the FLOPs of all ``ppo_epochs`` passes over the batch by the update's
    seconds: the same printed MFU on a two-epoch run reads back twice the peak."""
    import test_mfu_dialects as D

    from polytrace.calibrate.mfu import read_mfu

    peaks = []
    for epochs in (1, 2):
        monkeypatch.setattr(D, "LAUNCH", D.LAUNCH.replace("    trainer.nnodes=1",
                                                          f"    actor_rollout_ref.actor.ppo_epochs={epochs} \\\n"
                                                          "    trainer.nnodes=1"))
        path = tmp_path / f"run{epochs}.log"
        _write(path, "perf/mfu/actor", 0.05, TOKENS, 6, 15.0)
        log, run = _read(path)
        assert float(log.config.get("actor_rollout_ref.actor.ppo_epochs", 1)) == epochs
        peaks.append(read_mfu(log, run).peak_tflops)
    assert peaks[1] == pytest.approx(2.0 * peaks[0], rel=1e-9)
