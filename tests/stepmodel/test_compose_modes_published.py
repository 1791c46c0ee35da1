"""The execution modes against published per-stage averages: calibrate on one configuration from
its stage times (``polytrace calibrate --stage-times``), predict the others (other GPU counts, the
other modes), next to a naive predictor.

Published figures, read 2026-12-01 (the seconds are each run's averages over its 400 steps):

- ``FULLY_ASYNC``: https://github.com/volcengine/verl/blob/main/recipe/fully_async_policy/README.md,
  "Asynchronous Training on 7B Model": Qwen2.5-Math-7B, DAPO (no reference model), H20, vLLM +
  FSDP2, 512 prompts x 16 responses, ppo_mini_batch_size 32, max response 28K (prompt 2K);
  colocated sync on 32/64/128 GPUs against fully async (staleness 0.5, partial rollout, 4 updates
  per sync) on half/half splits.
- ``ONE_STEP_OFF``: https://github.com/volcengine/verl/blob/main/recipe/one_step_off_policy/README.md,
  "Experimental Results": Qwen2.5-Math-7B, DAPO, 16 H20, vLLM + FSDP2, max response 20K, colocated
  sync against one-step-off with 4 rollout and 12 trainer GPUs (batch sizes as the DAPO recipe:
  512 x 16, mini-batch 32, assumed).

The naive predictor scales the calibration configuration's step inversely with the GPU count and
gives async no gain over sync at the same GPU count.
"""

from __future__ import annotations

import json

import pytest

from polytrace.stepmodel.modes import mode_estimate

pytestmark = pytest.mark.filterwarnings("ignore")

MODEL, GPU, PROFILE = "qwen2.5-7b", "h20", "dapo-math-32b"
CONFIG_7B = dict(prompts=512, n=16, max_prompt_len=2048, max_response_len=28672, use_ref=False, ppo_mini_batch=32)
# GPUs -> (step, gen, old_log_prob, update_actor) seconds, colocated sync
FULLY_ASYNC_SYNC = {32: (790.10, 357.41, 107.71, 269.80), 64: (365.28, 150.72, 70.26, 133.41),
                    128: (356.30, 177.85, 53.92, 113.81)}
# GPUs -> (rollout GPUs, step seconds), fully async, staleness 0.5, partial rollout, 4 updates per sync
FULLY_ASYNC = {32: (16, 294.77), 64: (32, 189.26), 128: (64, 150.63)}
CALIBRATE_ON = 64
# The 32-GPU colocated run is 2.16x slower than the 64-GPU one (generation 2.37x) for 2x fewer GPUs:
# more than the GPU count explains. With the profile's lengths (mean response ~580 tokens, longest
# ~10K, none at the cap) nothing here saturates the KV cache or the trainer at 32 GPUs the way the
# run's longer responses did, so that configuration and its speedup are outside the goal.
MISSED = {32: "the 32-GPU colocated run scaled superlinearly to 64 GPUs (2.16x); the profile's lengths do not"}
# The fully async run on 16 + 16 GPUs: its rollout has half the 64-GPU calibration's GPUs. One
# configuration's four stage averages cannot split generation into per-iteration work (which does
# not shrink with fewer rollout GPUs) and per-token work (which does): the shared priors decide it.
ASYNC_MISSED = {32: (
    "fully async 16:16: 360 s against the published 294.8 s (+22%): calibrated on one 64-GPU configuration, "
    "generation's split between per-iteration host work and GEMM/decode work is the priors' (per-iteration host "
    "0.53x, per-sequence host 7.3x, GEMMs 1.06x the base prices), so most of it scales with the rollout GPUs and "
    "halving them costs more, where the run's generation, with responses to the 28K cap, barely moves with the GPU "
    "count (151 s colocated on 64 GPUs, 178 s on 128)")}
# The same README's "128-card Stale Ablation Experiment": fully async on 64 + 64 GPUs, partial
# rollout, 4 updates per sync, staleness -> step s (0.5 is FULLY_ASYNC[128]); the authors add that
# 0.3 and 0.5 come out close "because as the training steps increase, the response length changes
# significantly" between the runs.
STALENESS_ABLATION = {0.0: 231.34, 0.1: 171.30, 0.3: 146.11}
# The same README's "30B Model Mode Experiment": Qwen3-30B-A3B-Base, GRPO, H20, vLLM + Megatron,
# 512 prompts x 16, ppo_mini_batch_size 128, max response 8K (prompt 2K); the layout and offload from
# its script (verl/experimental/fully_async_policy/shell/grpo_30b_a3b_base_math_megatron_96_32.sh at
# the mirror's HEAD): trainer TP 2, CP 2, EP 8, rollout TP 4, parameter and optimizer offload,
# dynamic batches of 10K tokens, a KL-loss reference. Colocated sync on 128 GPUs (step, gen,
# old_log_prob, ref, update_actor s) against fully async on 96 rollout + 32 trainer GPUs
# (staleness 0.5, partial rollout, 4 updates per sync).
MODEL_30B = "qwen3-30b-a3b"
CONFIG_30B = dict(prompts=512, n=16, max_prompt_len=2048, max_response_len=8192, use_ref=True, ppo_mini_batch=128,
                  strategy="megatron", train_tp=2, train_cp=2, train_ep=8, rollout_tp=4, micro_batch_tokens=10240,
                  param_offload=True, optimizer_offload=True)
SYNC_30B = {"step": 497.89, "gen": 348.05, "old_log_prob": 28.73, "ref": 20.86, "update_actor": 86.27}
FULLY_ASYNC_30B = (96, 282.75)
ONE_STEP_OFF_SYNC = (749.0, 321.0, 88.0, 286.0)  # 16 GPUs colocated: step, gen, old_log_prob, update_actor
ONE_STEP_OFF = (4, 520.0)  # rollout GPUs, step seconds (trainer 12)


def _calibration(tmp_path, gpus, times, **config):
    from polytrace.calibrate.files import calibrate_from_stage_times, load, scalars_of

    text = ",".join(f"{k}={v}" for k, v in times.items())
    calibrate_from_stage_times(text, tmp_path / "cal.json", model=MODEL, gpu=GPU, gpus=gpus, profile=PROFILE,
                               **config)
    return scalars_of(load(tmp_path / "cal.json"))


def _step(gpus, mode, cal, **kw):
    return mode_estimate(PROFILE, MODEL, GPU, gpus, mode=mode, calibration=cal, steps=range(2),
                         **{**CONFIG_7B, **kw}).summary["mean_step_s"]


@pytest.fixture(scope="module")
def fully_async(tmp_path_factory):
    step, gen, olp, upd = FULLY_ASYNC_SYNC[CALIBRATE_ON]
    cal = _calibration(tmp_path_factory.mktemp("cal"), CALIBRATE_ON,
                       {"gen": gen, "old_log_prob": olp, "update_actor": upd, "step": step}, **CONFIG_7B)
    sync = {g: _step(g, "sync", cal) for g in FULLY_ASYNC_SYNC}
    async_ = {g: _step(g, "fully-async", cal, rollout_gpus=r, staleness=0.5, partial_rollout=True,
                       updates_per_sync=4) for g, (r, _) in FULLY_ASYNC.items()}
    return sync, async_


def _case(gpus, what):
    marks = [pytest.mark.xfail(strict=True, reason=MISSED[gpus])] if gpus in MISSED else []
    return pytest.param(gpus, marks=marks, id=f"{what}-{gpus}")


@pytest.mark.parametrize("gpus", [_case(g, "sync") for g in FULLY_ASYNC_SYNC if g != CALIBRATE_ON])
def test_sync_at_other_gpu_counts_within_20pct(fully_async, gpus):
    sync, _ = fully_async
    real = FULLY_ASYNC_SYNC[gpus][0]
    assert abs(sync[gpus] / real - 1) <= 0.20, (sync[gpus], real)


def _async_case(gpus):
    marks = [pytest.mark.xfail(strict=True, reason=ASYNC_MISSED[gpus])] if gpus in ASYNC_MISSED else []
    return pytest.param(gpus, marks=marks, id=str(gpus))


@pytest.mark.parametrize("gpus", [_async_case(g) for g in FULLY_ASYNC])
def test_fully_async_within_20pct(fully_async, gpus):
    _, async_ = fully_async
    real = FULLY_ASYNC[gpus][1]
    assert abs(async_[gpus] / real - 1) <= 0.20, (async_[gpus], real)


@pytest.mark.parametrize("gpus", [_case(g, "speedup") for g in FULLY_ASYNC])
def test_async_over_sync_speedup_within_25pct(fully_async, gpus):
    sync, async_ = fully_async
    ours = sync[gpus] / async_[gpus]
    real = FULLY_ASYNC_SYNC[gpus][0] / FULLY_ASYNC[gpus][1]
    assert abs(ours / real - 1) <= 0.25, (ours, real)


def test_ours_beats_naive_on_the_configurations_it_predicts(fully_async):
    sync, async_ = fully_async
    base = FULLY_ASYNC_SYNC[CALIBRATE_ON][0]
    ours, naive = [], []
    for g, (_, real) in FULLY_ASYNC.items():
        ours.append(abs(async_[g] / real - 1))
        naive.append(abs(base * CALIBRATE_ON / g / real - 1))  # no gain from async
    for g in FULLY_ASYNC_SYNC:
        if g not in MISSED and g != CALIBRATE_ON:
            ours.append(abs(sync[g] / FULLY_ASYNC_SYNC[g][0] - 1))
            naive.append(abs(base * CALIBRATE_ON / g / FULLY_ASYNC_SYNC[g][0] - 1))
    assert sum(ours) / len(ours) < 0.5 * sum(naive) / len(naive), (ours, naive)


@pytest.fixture(scope="module")
def one_step_off(tmp_path_factory):
    config = {**CONFIG_7B, "max_response_len": 20480}
    step, gen, olp, upd = ONE_STEP_OFF_SYNC
    cal = _calibration(tmp_path_factory.mktemp("cal16"), 16,
                       {"gen": gen, "old_log_prob": olp, "update_actor": upd, "step": step}, **config)
    sync = mode_estimate(PROFILE, MODEL, GPU, 16, mode="sync", calibration=cal, steps=range(2), **config)
    res = mode_estimate(PROFILE, MODEL, GPU, 16, mode="one-step-off", rollout_gpus=ONE_STEP_OFF[0], calibration=cal,
                        steps=range(2), **config)
    return sync.summary["mean_step_s"], res.summary


def test_one_step_off_within_20pct(one_step_off):
    """529 s against the published 520 s (2%; 584 s, 12%, before the priors were refitted with the
    corpus's H100 runs on their GPUs): since calibrations are deviations from the shared
    priors, the rollout's per-iteration host work is priced apart from its GEMMs, and it does not
    shrink with the 4x fewer rollout GPUs' share of the work (before, ours scaled nearly with the GPU
    count and missed by more than 20%)."""
    ours = one_step_off[1]["mean_step_s"]
    assert abs(ours / ONE_STEP_OFF[1] - 1) <= 0.20, ours


def test_one_step_off_speedup_and_trainer_side(one_step_off):
    sync, summary = one_step_off
    real = ONE_STEP_OFF_SYNC[0] / ONE_STEP_OFF[1]
    assert abs(sync / summary["mean_step_s"] / real - 1) <= 0.25, (sync / summary["mean_step_s"], real)
    # the trainer's stages on 12 of the 16 GPUs, against the published 108 s and 337 s
    stages = summary["mean_stages_s"]
    assert abs(stages["old_log_prob"] / 108 - 1) <= 0.20 and abs(stages["update_actor"] / 337 - 1) <= 0.20, stages


def test_cli_calibrate_once_then_ask_each_mode(tmp_path, capsys):
    from polytrace.cli import main

    cal = tmp_path / "cal.json"
    cfg = ["--prompts", "512", "--n", "16", "--max-prompt-len", "2048", "--max-response-len", "28672", "--no-ref",
           "--ppo-mini-batch", "32"]
    step, gen, olp, upd = FULLY_ASYNC_SYNC[CALIBRATE_ON]
    assert main(["calibrate", "--stage-times", f"gen={gen},old_log_prob={olp},update_actor={upd},step={step}",
                 "--model", MODEL, "--gpu", GPU, "--gpus", str(CALIBRATE_ON), *cfg, "-o", str(cal)]) == 0
    capsys.readouterr()
    where = ["estimate", "--calibration", str(cal), "--model", MODEL, "--gpu", GPU, "--gpus", "128", "--steps", "0"]
    assert main([*where, *cfg, "--mode", "fully-async", "--rollout-gpus", "64", "--staleness", "0.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["mode"]["mode"] == "fully-async" and "calibration" in doc
    assert abs(doc["summary"]["mean_step_s"] / FULLY_ASYNC[128][1] - 1) <= 0.20
    assert main([*where, *cfg, "--compare-modes"]) == 0
    out = capsys.readouterr().out
    assert "fully-async" in out and "one-step-off" in out
    # a calibration of another model family is refused, with --compare-modes too
    assert main([*where[:4], "llama-3.1-8b", *where[5:], "--compare-modes"]) == 2
    assert "--calibration" in capsys.readouterr().err
    # a log states its own configuration
    assert main(["calibrate", "some.log", "--ppo-mini-batch", "32", "-o", str(tmp_path / "x.json")]) == 2
    assert "--ppo-mini-batch applies to --stage-times" in capsys.readouterr().err


# ---- transfer ranges: what one configuration's calibration could not identify ----------------------

# configuration -> (GPUs, estimate keywords, published step s); calibrated as the fixtures above
TRANSFERS = {
    **{f"colocated-{g}": (g, dict(mode="sync"), v[0]) for g, v in FULLY_ASYNC_SYNC.items() if g != CALIBRATE_ON},
    **{f"fully-async-{r}:{g - r}": (g, dict(mode="fully-async", rollout_gpus=r, staleness=0.5, partial_rollout=True,
                                            updates_per_sync=4), real) for g, (r, real) in FULLY_ASYNC.items()},
    "one-step-off-4:12": (16, dict(mode="one-step-off", rollout_gpus=ONE_STEP_OFF[0]), ONE_STEP_OFF[1]),
    **{f"fully-async-64:64-staleness-{st:g}": (128, dict(mode="fully-async", rollout_gpus=64, staleness=st,
                                                         partial_rollout=True, updates_per_sync=4), real)
       for st, real in STALENESS_ABLATION.items()},
    "30b-fully-async-96:32": (128, dict(mode="fully-async", rollout_gpus=FULLY_ASYNC_30B[0], staleness=0.5,
                                        partial_rollout=True, updates_per_sync=4), FULLY_ASYNC_30B[1]),
}
RANGE_MISSED = {
    "colocated-32": "790 s published, range 425-553 s: the run scaled superlinearly to 64 GPUs (MISSED)",
    "colocated-128": ("356 s published, range 289-342 s: the run's generation grew from 151 s on 64 GPUs to 178 s on "
                      "128; nothing in the model grows it with more engines, and the window's constant range (up "
                      "to 115 of gen's 151 s) at most holds it near 147 s"),
    "fully-async-64:64-staleness-0": (
        "231 s published, range 174-215 s (estimate 177 s; 165 s before a sample counted as a whole group): at "
        "staleness 0 the published trainer waited 128 s a step for samples and updated for 99 s, nearly one after "
        "the other; the model's trainer (140 s of updates on 64 GPUs, scaled from the colocated 64-GPU "
        "calibration's 133 s) overlaps the rollout's 107 s batch and waits 23 s for its first groups"),
    "fully-async-64:64-staleness-0.3": (
        "146.1 s published, range 148.9-244.1 s: 3% faster than the staleness-0.5 run (150.6 s, inside), which the "
        "authors put down to the response lengths changing between the runs"),
}


@pytest.fixture(scope="module")
def transfer_ranges(tmp_path_factory):
    from polytrace.calibrate.files import calibrate_from_stage_times, estimate_calibrated

    def calibrate(gpus, times, model=MODEL, **config):
        out = tmp_path_factory.mktemp("transfer") / "cal.json"
        if not isinstance(times, dict):
            times = dict(zip(("step", "gen", "old_log_prob", "update_actor"), times))
        text = ",".join(f"{k}={v}" for k, v in times.items())
        calibrate_from_stage_times(text, out, model=model, gpu=GPU, gpus=gpus, profile=PROFILE, **config)
        return out

    config_1off = {**CONFIG_7B, "max_response_len": 20480}
    cals = {"fully": calibrate(CALIBRATE_ON, FULLY_ASYNC_SYNC[CALIBRATE_ON], **CONFIG_7B),
            "1off": calibrate(16, ONE_STEP_OFF_SYNC, **config_1off),
            "30b": calibrate(128, SYNC_30B, model=MODEL_30B, **CONFIG_30B)}
    out = {}
    for name, (gpus, kw, real) in TRANSFERS.items():
        which, model, config = (("1off", MODEL, config_1off) if name.startswith("one-step") else
                                ("30b", MODEL_30B, CONFIG_30B) if name.startswith("30b") else
                                ("fully", MODEL, CONFIG_7B))
        res = estimate_calibrated(cals[which], PROFILE, model, GPU, gpus, steps=range(2), **kw, **config)
        out[name] = (res.range.step_s, res.summary["mean_step_s"], real)
    return out


def _range_case(name):
    marks = [pytest.mark.xfail(strict=True, reason=RANGE_MISSED[name])] if name in RANGE_MISSED else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_range_case(n) for n in TRANSFERS])
def test_transfer_range_contains_the_published_step(transfer_ranges, name):
    (lo, hi), point, real = transfer_ranges[name]
    assert lo <= point <= hi and hi > lo, (lo, point, hi)
    assert lo <= real <= hi, (lo, real, hi)


@pytest.mark.xfail(strict=True, reason="6 of 10 (60%) published configurations inside their transfer range "
                   "(goal 80%; 4 of 6 before the staleness ablation and the 30B run joined them): RANGE_MISSED")
def test_transfer_ranges_contain_the_published_step_in_80pct(transfer_ranges):
    inside = [n for n, ((lo, hi), _p, real) in transfer_ranges.items() if lo <= real <= hi]
    assert len(inside) >= 0.8 * len(transfer_ranges), inside
