"""``validate``: calibration and prediction on verl logs, synthetic and real."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from _verl_logs import priced_probe

from polytrace.calibrate.validate import Overrides, validate
from polytrace.cli import main
from polytrace.errors import PolytraceError

LAUNCH = ("+ python3 -m verl.trainer.main_ppo data.train_batch_size=64 actor_rollout_ref.rollout.n=4 "
          "data.max_prompt_length=512 data.max_response_length=1024 trainer.n_gpus_per_node=4 trainer.nnodes=1 "
          "actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct "
          "actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.model.use_remove_padding=True\n")


# The run's deviation from the shared priors per kind of work: its stage times are the priors'
# prices (per kernel family, ``compose.efficiency.part_slowdown``) times these.
TRUE_SLOWDOWN = {"rollout": 2.5, "forward": 1.3, "train": 1.6, "forward_overhead": 4.0, "train_overhead": 5.0}


def _true_times(tmp_path, launch, stats_lines):
    """Stage seconds of each step under the model with the priors times ``TRUE_SLOWDOWN``: price
    the steps of a log that has only length statistics (and a placeholder gen time)."""
    from polytrace.stepmodel.efficiency import part_slowdown

    _, rows, prior = priced_probe(tmp_path / "probe.log", launch, stats_lines)
    return [{st: sum(TRUE_SLOWDOWN[g] * part_slowdown(prior, g, f) * v for (g, f), v in parts.items())
             for st, parts in r.families.items() if parts} for r in rows], [r.other_s for r in rows]


def _write_log(path, n_steps=60, launch=LAUNCH, noise=0.01, seed=0, with_gen=True):
    """A log whose stage times follow the model at known slowdowns, with noise; responses grow
    over the run, and every tenth step runs a 50 s validation."""
    rng = np.random.default_rng(seed)
    stats = []
    for step in range(1, n_steps + 1):
        mean = 60 + 15 * step
        stats.append(" - ".join([f"response_length/mean:{mean}", "response_length/max:1024", "response_length/min:5",
                                 "response_length/clip_ratio:0.01", "prompt_length/mean:100",
                                 "prompt_length/max:300"]))
    times, other = _true_times(path.parent, LAUNCH, stats)  # the run's true configuration
    lines = [launch]
    for step, (t, o, s) in enumerate(zip(times, other, stats), 1):
        gen, olp, upd = (t[k] * (1 + noise * rng.standard_normal()) for k in ("gen", "old_log_prob", "update_actor"))
        parts = [f"timing_s/gen:{gen:.3f}"] if with_gen else []
        total = gen + olp + upd + o + (50 if step % 10 == 0 else 0)
        parts += [f"timing_s/old_log_prob:{olp:.3f}", f"timing_s/update_actor:{upd:.3f}",
                  f"timing_s/adv:{o:.3f}", f"timing_s/step:{total:.3f}", s]
        if step % 10 == 0:
            parts.append("timing_s/testing:50.0")
        lines.append(f"(TaskRunner pid=1) step:{step} - " + " - ".join(parts) + "\n")
    path.write_text("".join(lines))
    return path


def test_synthetic_log_is_predicted_and_beats_naive(tmp_path):
    res = validate(_write_log(tmp_path / "a.log"), calibrate_steps=10)
    acc = res.accuracy
    assert res.stages == ["gen", "old_log_prob", "update_actor"]
    assert res.step_time_variation > 0.2
    for k in ("gen", "old_log_prob", "update_actor", "step"):
        assert acc[k]["accuracy"] > 97.0, (k, acc[k])
        assert acc[k]["mape"] < 0.5 * acc[k]["naive_mape"], (k, acc[k])
    assert res.excluded_s["testing"] == pytest.approx(50.0 * 6)
    assert all(res.goals.values())
    scalars = res.calibration["scalars"]
    assert {f"{k}_slowdown" for k in TRUE_SLOWDOWN} <= set(scalars), scalars
    assert {k for k in scalars if k.endswith("_overhead_s")} == {f"{s}_overhead_s" for s in res.stages + ["other"]}
    # the rollout's deviation from the priors is pinned by gen alone; the trainer's four share two
    # stages and a prior
    assert res.calibration_deviation["rollout"] == pytest.approx(TRUE_SLOWDOWN["rollout"], rel=0.10)
    # these stage times have no fixed part and their lengths grow 13x: the data must override the
    # prior (half the trainer stages, 15% of generation) down to under 15% of each stage (at the
    # priors' prices the trainer's per-micro-batch host work, which does not grow with the lengths,
    # is a larger share of each stage, so the window tells the constant apart less sharply: 12.4%
    # on the log-prob pass)
    for s in res.stages:
        assert scalars[f"{s}_overhead_s"] < 0.15 * acc[s]["mean_actual_s"], (s, scalars)


def test_calibrate_on_another_log(tmp_path):
    a = _write_log(tmp_path / "a.log", seed=1)
    b = _write_log(tmp_path / "b.log", seed=2)
    res = validate(b, calibrate_on=str(a))
    assert res.predicted_steps == 60
    assert res.accuracy["step"]["accuracy"] > 97.0


def test_bad_inputs_name_the_flag(tmp_path):
    no_gpus = LAUNCH.replace("trainer.n_gpus_per_node=4 ", "")
    with pytest.raises(PolytraceError, match="--gpus"):
        validate(_write_log(tmp_path / "a.log", launch=no_gpus))
    assert validate(_write_log(tmp_path / "a.log", launch=no_gpus), overrides=Overrides(gpus=4)).steps == 60
    no_model = LAUNCH.replace("Qwen/Qwen2.5-1.5B-Instruct", "/ckpt/step_100")
    with pytest.raises(PolytraceError, match="--model"):
        validate(_write_log(tmp_path / "b.log", launch=no_model))
    with pytest.raises(PolytraceError, match="missing timing keys"):
        validate(_write_log(tmp_path / "c.log", with_gen=False))
    with pytest.raises(PolytraceError, match="calibrate-steps"):
        validate(_write_log(tmp_path / "d.log", n_steps=8))


def test_cli_errors_are_one_line(tmp_path, capsys):
    empty = tmp_path / "e.log"
    empty.write_text("no steps\n")
    assert main(["validate", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("polytrace: error:") and "\n" not in err
    assert main(["estimate", "--model", "qwen2.5-7b", "--gpu", "k80", "--gpus", "8"]) == 2
    assert "valid GPUs" in capsys.readouterr().err


def test_cli_validate_and_estimate_print(tmp_path, capsys):
    assert main(["validate", str(_write_log(tmp_path / "a.log"))]) == 0
    out = capsys.readouterr().out
    assert "update_actor" in out and "naive" in out and "goals:" in out
    assert main(["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--profile",
                 "search-r1-7b", "--prompts", "16"]) == 0
    assert "tok/s/GPU" in capsys.readouterr().out


# ---- the real logs in ../shared/validation-logs ----------------------------------------------

LOGS = ["verl_qwen2.5-0.5b_ppo_1gpu_p1024_r512.log", "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log",
        "verl_gemma-2-2b_ppo_2gpu_p1024_r512.log", "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log"]
QWEN7B = "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log"
# On the Qwen2-7B log, generation time drifts from ~47 s to ~80 s and back over steps 53-137
# while every logged length statistic stays flat (mean ~215, max 1024, clip ~0.2%); no predictor
# of that step's lengths can follow it (a least-squares fit on all 210 steps reaches 84% on gen).
# The GPU-bound stages stay flat through it (old log-prob 30-31 s, update 123-126 s), and the log's
# line 8 is Ray's warning that another Ray cluster was active on the node: a job sharing it, whose
# load nothing logged measures (``read_log`` notes it).
UNMET = {(QWEN7B, "gen"): ("gen 84.3% (naive 74.1%): generation slows over steps 53-137 with flat lengths and flat "
                           "GPU-bound stages, on a node Ray found another Ray cluster on (log line 8)"),
         (QWEN7B, "step"): "step 94.4% (naive 85.9%): the same generation slowdown"}


# ``_result`` (validate) and ``_prepared`` below prepare three logs the same way (window 10, no
# overrides): each is priced once (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("each_log_priced_once")


@functools.cache
def _result(folder: str, name: str) -> dict:
    return validate(f"{folder}/{name}", calibrate_steps=10)


def _cases():
    for name in LOGS:
        for stage, goal in (("step", 95.0), ("gen", 90.0), ("log_prob", 90.0), ("update_actor", 90.0)):
            marks = []
            if (name, stage) in UNMET:
                marks = [pytest.mark.xfail(strict=True, reason=UNMET[(name, stage)])]
            yield pytest.param(name, stage, goal, marks=marks, id=f"{name.split('_', 1)[1][:22]}-{stage}")


@pytest.mark.parametrize("name, stage, goal", list(_cases()))
def test_shared_log_accuracy_goal(validation_logs, name, stage, goal):
    res = _result(str(validation_logs), name)
    stages = ["old_log_prob", "ref"] if stage == "log_prob" else [stage]
    stages = [s for s in stages if s in res.accuracy]
    assert stages, f"{name}: no {stage} timing"
    for s in stages:
        assert res.accuracy[s]["accuracy"] >= goal, (name, s, res.accuracy[s])


# The table in docs/step-model.md (ours), per log and stage: asserted to within 0.3 points, so the
# table and the code cannot drift apart. Since calibration became a bounded deviation from the shared
# priors: the p512/r256 log's step 96.8 -> 97.1 and gen 94.2 -> 93.9, gemma's reference pass 98.3 ->
# 98.2, the Qwen2-7B log's gen 83.1 -> 82.4 (its window cannot split generation's constant from its
# per-token cost, so the priors decide it; the goal is unmet either way, UNMET). With FSDP's forward
# gathers overlapped and the priors refitted: gemma's step 98.3 -> 98.4, the Qwen2-7B log's step
# 93.7 -> 93.9 and gen 82.4 -> 83.2. With the priors refitted on the corpus logs' stated or
# inferred GPUs (the H100 runs no longer priced as A100s): the resp.-512 log's gen 98.3 -> 98.2, the
# resp.-256 log's step 97.1 -> 97.3 and gen 93.9 -> 93.3, gemma's step 98.4 -> 98.3 and gen 96.3 ->
# 96.1, the Qwen2-7B log's step 93.9 -> 94.2 and gen 83.2 -> 83.9. Since the priors price the
# rollout's host work per sequence apart (zero-shot generation 33.8% -> 18.7% median error) and
# price the colocated refit and switch, the resp.-256 log's same-run step 97.3 -> 95.2 and gen
# 93.3 -> 90.5 (its calibration window's one rollout deviation scales the per-sequence host work,
# 7.3x its base price, with the GEMMs), the resp.-512 log's step 99.3 -> 99.0 and gen 98.2 -> 98.0,
# gemma's step 98.3 -> 98.4 and gen 96.1 -> 96.4, the Qwen2-7B log's step 94.2 -> 94.4 and gen
# 83.9 -> 84.3.
README_TABLE = {
    LOGS[0]: {"step": 99.0, "gen": 98.0, "ref": 99.4, "values": 98.6, "update_critic": 98.1, "update_actor": 99.2},
    LOGS[1]: {"step": 95.2, "gen": 90.5, "ref": 98.2, "values": 96.1, "update_critic": 96.0, "update_actor": 98.1},
    LOGS[2]: {"step": 98.4, "gen": 96.4, "ref": 98.2, "values": 97.9, "update_critic": 98.2, "update_actor": 98.6},
    LOGS[3]: {"step": 94.4, "gen": 84.3, "old_log_prob": 98.5, "update_actor": 99.4},
}

@pytest.mark.parametrize("name", LOGS)
def test_shared_log_matches_readme_table(validation_logs, name):
    acc = _result(str(validation_logs), name).accuracy
    got = {k: round(acc[k]["accuracy"], 1) for k in README_TABLE[name]}
    assert all(got[k] >= v - 0.3 for k, v in README_TABLE[name].items()), (got, README_TABLE[name])


@pytest.mark.parametrize("name", LOGS)
def test_shared_log_calibrates_named_scalars(validation_logs, name):
    """At most five slowdowns (one per kind of work), one fixed cost per timed stage and one for
    the step outside the stages: nothing per step, nothing unnamed."""
    res = _result(str(validation_logs), name)
    scalars = res.calibration["scalars"]
    from polytrace.stepmodel.efficiency import SEPARATE_FAMILIES
    from polytrace.stepmodel.stages import GROUPS

    slowdowns = [k for k in scalars if k.endswith("_slowdown")]
    kinds = [k for k in slowdowns if k.removesuffix("_slowdown") in GROUPS]
    assert 3 <= len(kinds) <= 5, scalars
    # the rest: a kind's families the priors price apart (host work, collectives, offload)
    for k in set(slowdowns) - set(kinds):
        stem = k.removesuffix("_slowdown")
        fams = [f for f in SEPARATE_FAMILIES if stem.endswith(f"_{f}")]
        assert fams, k
        fam = max(fams, key=len)  # "seq_host" before "host"
        assert stem.removesuffix(f"_{fam}") in GROUPS, k
    assert set(scalars) - set(slowdowns) == {f"{s}_overhead_s" for s in res.stages + ["other"]}, scalars
    assert set(res.calibration_deviation) == {k.removesuffix("_slowdown") for k in kinds}


def _naive_case(name):
    if name != "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log":
        return name
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=(
        "steady run (step time varies under 20%): step MAPE 4.8% against the naive 2.9% (+0.5 allowed) since the "
        "priors price the rollout's per-sequence host work apart (2.6% before): README_TABLE's comment")))


@pytest.mark.parametrize("name", [_naive_case(n) for n in LOGS])
def test_shared_log_beats_naive_where_step_time_varies(validation_logs, name):
    res = _result(str(validation_logs), name)
    step = res.accuracy["step"]
    if res.step_time_variation > 0.20:
        assert step["mape"] <= 0.5 * step["naive_mape"], step
    else:  # steady runs: at least as good as repeating the mean, within noise
        assert step["mape"] <= step["naive_mape"] + 0.5, step


# ---- hold-out checks: calibrate on one stretch, predict another ---------------------------------


@functools.cache
def _prepared(folder: str, name: str):
    from polytrace.calibrate.validate import prepare

    return prepare(f"{folder}/{name}")


def _holdout(cal_rows, test_rows, stages, first_step, run, transfer=False):
    from polytrace.calibrate.fit import calibrate, prior_for

    cal = calibrate(cal_rows, stages, first_step=first_step, transfer=transfer, prior=prior_for(run))
    preds = [cal.predict(r, stages) for r in test_rows]
    return {k: 100 - 100 * float(np.mean([abs(p[k] - r.actual[k]) / r.actual[k] for p, r in zip(preds, test_rows)]))
            for k in stages + ["step"]}


@pytest.mark.parametrize("start", [
    # 30: met under the 22-log priors (update at 94.9% under the nine-log priors, a strict xfail then:
    # the priors decided the flat window's constant/per-token split and put more of it per token)
    30,
    pytest.param(100, marks=pytest.mark.xfail(strict=True, reason=(
        "step 87.9% (goal 90; 89.9% before the rollout's per-sequence host work was priced apart): since "
        "decode prices the linear layers and attention as two kernels run one after the other (as vLLM runs "
        "them), predicted generation grows with response length where this run's does not (steps 53-137 "
        "drift without a length cause, see UNMET); with the old overlapped decode roofline 90.1%")))])
def test_qwen7b_calibrated_mid_run_predicts_the_rest(validation_logs, start):
    """The Qwen2-7B run's responses go from 200 to 669 tokens: ten steps from the middle of the
    run (flat lengths near 215) predict the whole run, the long-response end included, for the
    trainer stages (its generation drifts without a length cause; see UNMET)."""
    log, run, _, rows, _ = _prepared(str(validation_logs), QWEN7B)
    stages = ["gen", "old_log_prob", "update_actor"]
    window = rows[start:start + 10]
    acc = _holdout(window, [r for r in rows if r not in window], stages, log.steps[0].step, run)
    assert acc["old_log_prob"] >= 93.0 and acc["update_actor"] >= 95.0 and acc["step"] >= 90.0, acc


def test_real_grpo_to_ppo_pair(validation_logs):
    """Calibrated on every step of the Qwen2.5-0.5B GRPO run (8 GPUs, dynamic batch sizes, 4
    update micro-batches per GPU), predicting the PPO run of the same model and cluster (64 per
    GPU, a critic never timed in the GRPO run), both on the GPU their publisher states
    (``polytrace/data/corpus_gpus.json``: H100): step >= 90% (97.7% with generation's constant for
    another run at 0 s; 98.4% before; 94.2% before the rollout's per-sequence host work was priced
    apart; 91.6% before the priors)."""
    from polytrace.calibrate.corpus import load_corpus_gpus
    from polytrace.calibrate.logconfig import Overrides

    ppo, grpo = "verl_qwen2.5-0.5b_ppo_8gpu_b2048.log", "verl_qwen2.5-0.5b_grpo_8gpu_n2_dynbsz.log"
    stated = load_corpus_gpus()
    assert stated[ppo]["gpu"] == stated[grpo]["gpu"]  # the same cluster
    res = validate(f"{validation_logs}/{ppo}", calibrate_on=f"{validation_logs}/{grpo}",
                   overrides=Overrides(gpu=stated[ppo]["gpu"]))
    assert res.accuracy["step"]["accuracy"] >= 90.0, res.accuracy


@pytest.mark.xfail(strict=True, reason="Qwen2.5-0.5B p1024/r512 -> p512/r256 (both 1 GPU, GPU type unstated): "
                   "step 75.7% (naive 96.0%; CPU estimate at 44c0f13, 79.7% before the priors refit at ef0b374); "
                   "generation and the padded trainer passes barely change between the two runs while the "
                   "roofline halves, see docs/step-model.md")
def test_qwen05b_across_runs(validation_logs):
    """The two Qwen2.5-0.5B PPO runs differ only in their length caps (1024+512 vs 512+256):
    calibrate on the first ten steps of one, predict every step of the other."""
    log, run, _, a, _ = _prepared(str(validation_logs), LOGS[0])
    b = _prepared(str(validation_logs), LOGS[1])[3]
    stages = ["gen", "ref", "values", "update_critic", "update_actor"]
    acc = _holdout(a[:10], b, stages, log.steps[0].step, run, transfer=True)  # as validate --calibrate-on
    assert acc["step"] >= 90.0, acc
