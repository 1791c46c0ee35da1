"""``estimate --gen-batch / --gen-batches``: DAPO's dynamic sampling priced by the forward model
(``polytrace/stepmodel/dynamic_sampling.py``): generation runs ``--gen-batches`` rollouts of
``--gen-batch`` prompts a step, the trainer's passes the ``--prompts`` kept."""

from __future__ import annotations

import json

import pytest

from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.stepmodel import estimate
from polytrace.stepmodel.workloads import stated_lengths_profile

PROFILE = stated_lengths_profile("mean=600,max=2000,prompt=150", model="qwen2.5-1.5b")
TRAINER = ("old_log_prob", "ref", "update_actor")


def _est(**kw):
    return estimate(PROFILE, "qwen2.5-1.5b", "h100", 8, rollout_tp=1, n=4, steps=(0, 1), **kw)


def test_generation_is_the_generation_batch_run_gen_batches_times_and_training_the_kept_prompts():
    dapo = _est(prompts=8, gen_batch=24, gen_batches=1.5)
    gen24, train8 = _est(prompts=24), _est(prompts=8)
    for row, g, t in zip(dapo.rows, gen24.rows, train8.rows):
        assert row["stages_s"]["gen"] == pytest.approx(1.5 * g["stages_s"]["gen"], rel=1e-12)
        assert row["other_s"] == pytest.approx(1.5 * g["other_s"], rel=1e-12)  # reward: every response scored
        for stage in TRAINER:
            assert row["stages_s"][stage] == pytest.approx(t["stages_s"][stage], rel=1e-12), stage
        assert any(n.startswith("dynamic sampling (DAPO): generation runs 24 prompts x 4 a batch, 1.5 batch(es) a "
                                "step; the trainer the 8 prompts kept") for n in row["notes"]), row["notes"]
    assert (dapo.config["gen_batch_prompts"], dapo.config["gen_batches"]) == (24, 1.5)
    # 3x the prompts and 1.5x the batches: generation costs more than the kept batch's, trainer the same
    assert dapo.summary["mean_stages_s"]["gen"] > 1.5 * train8.summary["mean_stages_s"]["gen"]


def test_more_batches_of_the_trained_prompts_repeat_their_rollout():
    twice, once = _est(prompts=8, gen_batches=2.0), _est(prompts=8)
    for row, one in zip(twice.rows, once.rows):
        assert row["stages_s"]["gen"] == pytest.approx(2 * one["stages_s"]["gen"], rel=1e-12)
        assert row["stages_s"]["update_actor"] == one["stages_s"]["update_actor"]
    assert twice.config["gen_batch_prompts"] is None
    # a generation batch the size of the trained one is no separate batch: the same estimate
    same = _est(prompts=8, gen_batch=8)
    assert [r["step_s"] for r in same.rows] == [r["step_s"] for r in once.rows]


@pytest.mark.parametrize("kw, message", [
    ({"prompts": 8, "gen_batch": 4}, "--gen-batch 4 is below the 8 prompts trained on"),
    ({"prompts": 8, "gen_batches": 0.5}, "must be in [1, 1000], got 0.5"),
])
def test_a_generation_batch_that_cannot_be_is_one_line(kw, message):
    with pytest.raises(PolytraceError) as exc:
        _est(**kw)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# the CLI run the tests below vary: 8 prompts x 4 on 8 H100s, lengths stated
_LENGTHS = ["--lengths", "mean=600,max=2000,prompt=150"]
_CLI_RUN = ["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h100", "--gpus", "8", "--prompts", "8", "--n", "4"]


@pytest.mark.parametrize("argv, message", [
    (["--mode", "one-step-off", "--gen-batch", "24"], "priced in --mode sync only, not --mode one-step-off"),
    (["--profile", "search-r1-7b", "--gen-batches", "2"], "price single-turn profiles; this profile is multi-turn"),
])
def test_what_dynamic_sampling_does_not_price_is_refused(capsys, argv, message):
    base = _CLI_RUN if "--profile" in argv else _CLI_RUN + _LENGTHS
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("polytrace: error:") and message in err and "\n" not in err, err


def test_a_generation_batch_the_size_of_the_trained_one_is_no_dapo_in_every_mode(capsys):
    """Sync and the separated modes decide "generation apart from the trained batch" by one rule
    (``samples_apart``): --gen-batch equal to --prompts is no DAPO at all, so one-step-off prices it
    as the same run without the flag (it used to refuse it), and --gen-batch above it is refused."""
    base = _CLI_RUN + _LENGTHS + ["--mode", "one-step-off", "--json"]
    outs = []
    for extra in ([], ["--gen-batch", "8"], ["--gen-batches", "1"]):
        assert main(base + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["summary"]["mean_step_s"] > 0
    assert outs[1]["summary"] == outs[0]["summary"] and outs[2]["summary"] == outs[0]["summary"]
    assert main(base + ["--gen-batch", "9"]) == 2
    assert "priced in --mode sync only, not --mode one-step-off" in capsys.readouterr().err


def test_the_run_line_says_what_is_generated(capsys):
    assert main(_CLI_RUN + _LENGTHS + ["--gen-batch", "24", "--gen-batches", "1.5"]) == 0
    out = capsys.readouterr()
    run_line = next(line for line in out.out.splitlines() if " | qwen2.5-1.5b | " in line)
    assert "| 8 prompts x 4 (generated: 1.5 x 24 prompts) |" in run_line, run_line
    # the assumption the pricing makes, said once on stderr (not once a step)
    notes = [line for line in out.err.splitlines() if line.startswith("note: dynamic sampling (DAPO)")]
    assert len(notes) == 1 and "sampled from the profile apart from the generation batch" in notes[0], out.err


def test_a_calibrations_constant_is_paid_by_every_generation_batch():
    """A calibration's constant seconds are per call (``fit``: a DAPO log's generation batches each
    pay it), so an estimate of K batches a step adds K of them."""
    from polytrace.stepmodel.estimate import calibrated_kernels
    from polytrace.stepmodel.stages import Part

    parts = [Part("gen", "gemm", "rollout", 1.0), Part("update_actor", "gemm", "train", 2.0)]
    cal = {"gen_overhead_s": 5.0, "update_actor_overhead_s": 3.0}
    assert calibrated_kernels(parts, cal)["gen"]["calibration"] == 5.0
    twice = calibrated_kernels(parts, cal, {"gen": 1.5})
    assert (twice["gen"]["calibration"], twice["update_actor"]["calibration"]) == (7.5, 3.0)
