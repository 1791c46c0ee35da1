"""Megatron's CPU optimizer (HybridDeviceOptimizer: ``optimizer_cpu_offload`` with
``optimizer_offload_fraction``), as verl's recipes for 235B-671B models on 96 GB GPUs and slime's
"CPU Adam" set it: its memory (the share of fp32 master weights and Adam moments that leaves the
GPU), its price (gradients to the host, AdamW through host DRAM, weights back; overlapped or not),
the flag, verl's keys in ``--set`` and in a log, and its bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polytrace.cli import main

pytestmark = pytest.mark.filterwarnings("ignore")

LENGTHS = "mean=1000,max=4000,prompt=150"
_O = "actor_rollout_ref.actor.optim.override_optimizer_config"


def _cfg(model="qwen3-30b-a3b", gpu="h100", gpus=16, **kw):
    from polytrace.stepmodel.estimate import build_config
    from polytrace.stepmodel.workloads import stated_lengths_profile

    prof = stated_lengths_profile(LENGTHS, model=model)
    base = dict(rollout_tp=2, strategy="megatron", train_pp=2, train_ep=8, n=8, responses_per_step=64,
                train_batch=16)
    return build_config(prof, model, gpu, gpus, **{**base, **kw})


def _parts(cfg):
    from polytrace.stepmodel.stages import stage_costs

    return stage_costs(cfg, np.full(64, 150), np.full(64, 900)).parts


def _cpu_part(cfg):
    got = [p for p in _parts(cfg) if p.source.startswith("host (CPU AdamW")]
    return got[0] if len(got) == 1 else None if not got else pytest.fail(f"{len(got)} CPU optimizer parts")


def _gpu_optimizer(cfg) -> float:
    return sum(p.seconds for p in _parts(cfg) if p.family == "optimizer" and p.stage == "update_actor")


def test_the_cpu_share_of_master_weights_and_moments_leaves_the_gpu():
    from polytrace.run.models import get_model
    from polytrace.stepmodel.memory import trainer_state_bytes

    m = get_model("qwen3-30b-a3b")
    on_gpu = trainer_state_bytes(m, 16, "megatron", 1, 2, ep=8)
    for share in (0.25, 1.0):
        got = trainer_state_bytes(m, 16, "megatron", 1, 2, ep=8, cpu_optimizer=share)
        for k in ("master_fp32", "adam_moments"):
            assert got[k] == pytest.approx(on_gpu[k] * (1 - share), rel=1e-12), (k, share)
        # the bf16 weights and fp32 main gradients stay: the backward writes them on the GPU
        assert got["weights_bf16"] == on_gpu["weights_bf16"] and got["gradients"] == on_gpu["gradients"]
    assert on_gpu["master_fp32"] == pytest.approx(4 * m.params_total / 16, rel=1e-12)


def test_the_cpu_step_is_priced_from_the_host_dram_and_the_link():
    """Per optimizer step: the local shard's share (trained / GPUs x share) moves 80 bytes a
    parameter through host DRAM at 70% of the GPU's share of its peak, 4 bytes to the host and 4
    back over the link; without overlap the three add, with it the slowest sets the time. The
    offload prior scales it like every host-memory part (unit prior here: the raw price)."""
    from polytrace.stepmodel.efficiency import DEFAULT, host_copy_gbps

    cfg = _cfg(cpu_optimizer=0.5)
    assert cfg.mini_batches == 4
    local = 0.5 * cfg.model.params_total / 16
    step = local * 80.0 / (76.8e9 * 0.70)
    copy = 4.0 * local / (host_copy_gbps(cfg.gpu, DEFAULT) * 1e9)
    part = _cpu_part(cfg)
    assert (part.stage, part.family, part.group) == ("update_actor", "offload", "train_overhead")
    assert part.seconds == pytest.approx(4 * (step + 2 * copy), rel=1e-12)
    overlapped = _cpu_part(_cfg(cpu_optimizer=0.5, cpu_optimizer_overlap=True))
    assert overlapped.seconds == pytest.approx(4 * max(step, copy), rel=1e-12)
    assert overlapped.seconds < part.seconds
    # a GB200's Grace feeds its two GPUs 256 GB/s each: the same step 3.3x faster through DRAM
    gb = _cfg(gpu="gb200", cpu_optimizer=0.5, cpu_optimizer_overlap=True)
    assert gb.gpu.host_memory_gbps == 256.0
    gb_copy = 4.0 * local / (host_copy_gbps(gb.gpu, DEFAULT) * 1e9)
    assert _cpu_part(gb).seconds == pytest.approx(4 * max(local * 80.0 / (256e9 * 0.70), gb_copy), rel=1e-12)


def test_the_gpu_keeps_only_its_own_share_of_the_optimizer_step():
    full = _gpu_optimizer(_cfg())
    assert full > 0 and _cpu_part(_cfg()) is None
    assert _gpu_optimizer(_cfg(cpu_optimizer=0.25)) == pytest.approx(0.75 * full, rel=1e-12)
    assert _gpu_optimizer(_cfg(cpu_optimizer=1.0)) == 0.0
    # more optimizer steps a step, more CPU steps
    assert _cpu_part(_cfg(cpu_optimizer=1.0, train_batch=32)).seconds == pytest.approx(
        _cpu_part(_cfg(cpu_optimizer=1.0)).seconds / 2, rel=1e-12)


def test_offload_around_the_stages_moves_only_what_the_gpu_holds():
    """verl's optimizer offload and NeMo RL's switch move the optimizer state the GPU holds; the
    CPU optimizer's share never left CPU memory."""
    def offload(cfg):
        return sum(p.seconds for p in _parts(cfg) if p.family == "offload" and not p.source.startswith("host ("))

    base = offload(_cfg(optimizer_offload=True)) - offload(_cfg())
    assert base > 0
    assert offload(_cfg(optimizer_offload=True, cpu_optimizer=1.0)) - offload(_cfg(cpu_optimizer=1.0)) == \
        pytest.approx(0.0, abs=1e-12)
    assert offload(_cfg(optimizer_offload=True, cpu_optimizer=0.5)) - offload(_cfg(cpu_optimizer=0.5)) == \
        pytest.approx(base / 2, rel=1e-9)


def test_the_cpu_optimizer_is_a_model_price_not_a_measurement():
    from polytrace.stepmodel.breakdown import source_status
    from polytrace.stepmodel.result import Price

    part = _cpu_part(_cfg(cpu_optimizer=1.0))
    # the part says its price itself (a model price), not its source text's prefix
    assert part.priced is Price.ROOFLINE
    assert source_status(part.source, [part.priced]) == "roofline"
    assert source_status(f"roofline + {part.source}", ["roofline", part.priced]) == "roofline"
    assert source_status("results/h100/gemm.json (torch) + roofline") == "partly measured"


def test_a_documented_verl_recipe_that_needs_it_is_refused_without_it(capsys):
    """verl's DeepSeek-V3 recipe on 96 H20s (docs/perf/dpsk.md: TP 8, PP 12, EP 8, optimizer
    offload fraction 1, the reference offloaded): 126 GB of training state per GPU on the GPU, 42 GB
    with the optimizer in CPU memory. Refused without it, with the fix named; runs with it."""
    argv = ["estimate", "--model", "deepseek-v3", "--gpu", "h20", "--gpus", "96", "--prompts", "96", "--n", "8",
            "--ppo-mini-batch", "32", "--lengths", "mean=1960,prompt=150", "--max-response-len", "9632",
            "--max-prompt-len", "2048", "--rollout-tp", "32", "--strategy", "megatron", "--train-tp", "8",
            "--train-pp", "12", "--train-ep", "8", "--param-offload", "--optimizer-offload", "--mem-fraction", "0.6",
            "--set", "actor_rollout_ref.ref.megatron.param_offload=true"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    # 126 GB: bf16 weights 14, fp32 gradients 28, master weights 28 and moments 56 (the reference offloaded)
    assert len(err.splitlines()) == 1 and "--cpu-optimizer 1" in err and "126 GB" in err
    assert main([*argv, "--cpu-optimizer", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["config"]["cpu_optimizer"] == 1.0
    state = res["memory"]["training_state"]
    assert state["actor_master_fp32"] == state["actor_adam_moments"] == 0.0
    assert res["memory"]["training_state_total"] == pytest.approx(14 + 28, abs=0.5)  # bf16 weights, fp32 grads
    assert res["summary"]["kernels"]["update_actor"]["offload"]["s"] > 0


def test_verl_keys_in_set_give_the_same_run_as_the_flags(capsys):
    common = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--strategy", "megatron",
              "--train-pp", "2", "--train-ep", "8", "--rollout-tp", "2", "--lengths", LENGTHS, "--n", "8",
              "--responses-per-step", "64", "--json"]

    def step(*extra):
        assert main([*common, *extra]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    flags = step("--cpu-optimizer", "0.5", "--cpu-optimizer-overlap")
    keys = step("--set", f"+{_O}.optimizer_cpu_offload=true", "--set", f"{_O}.optimizer_offload_fraction=0.5",
                "--set", f"{_O}.overlap_cpu_optimizer_d2h_h2d=true")
    assert keys["config"]["cpu_optimizer"] == 0.5 and keys["config"]["cpu_optimizer_overlap"] is True
    assert keys["summary"]["mean_step_s"] == flags["summary"]["mean_step_s"]
    # Megatron reads the fraction only with optimizer_cpu_offload on
    off = step("--set", f"{_O}.optimizer_offload_fraction=0.5")
    assert off["config"]["cpu_optimizer"] == 0.0
    assert off["summary"]["mean_step_s"] == step()["summary"]["mean_step_s"] < flags["summary"]["mean_step_s"]


@pytest.mark.parametrize("extra, expected", [
    (["--cpu-optimizer", "1.5"], "--cpu-optimizer: expected a share in [0, 1], got '1.5'"),
    (["--cpu-optimizer", "nan"], "--cpu-optimizer"),
    (["--set", f"{_O}.optimizer_offload_fraction=2"], "expected a share in [0, 1]"),
    (["--set", f"{_O}.optimizer_cpu_offload=maybe"], "expected true or false"),
    (["--cpu-optimizer", "1", "--set", f"{_O}.optimizer_cpu_offload=true", "--set",
      f"{_O}.optimizer_offload_fraction=0.5"], "contradicts --cpu-optimizer 1.0"),
    (["--cpu-optimizer", "1", "--set", f"{_O}.optimizer_cpu_offload=false"], "optimizer_cpu_offload=False"),
    # the overlap flag with no CPU optimizer to overlap changes nothing: refused, with --set too
    (["--cpu-optimizer-overlap"], "give --cpu-optimizer SHARE (above 0) too"),
    (["--cpu-optimizer-overlap", "--set", f"{_O}.optimizer_offload_fraction=0"], "give --cpu-optimizer SHARE"),
])
def test_bad_cpu_optimizer_input_is_one_line_exit_2(capsys, extra, expected):
    argv = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--strategy", "megatron",
            "--train-ep", "8", "--lengths", LENGTHS, *extra]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) <= 2 and "Traceback" not in err, err


def test_verl_overlap_key_without_a_cpu_share_is_read_not_refused(capsys):
    """verl's DeepSeek-V3 script sets ``overlap_cpu_optimizer_d2h_h2d`` whatever its offload
    fraction (0 on 256 GPUs): the key alone changes nothing and is accepted; the flag alone is not."""
    argv = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--strategy", "megatron",
            "--train-ep", "8", "--lengths", LENGTHS, "--json"]
    assert main([*argv, "--set", f"{_O}.overlap_cpu_optimizer_d2h_h2d=true"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["cpu_optimizer"] == 0.0
    assert main([*argv, "--cpu-optimizer", "0.5", "--cpu-optimizer-overlap"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["cpu_optimizer_overlap"] is True


def test_fsdp_has_no_megatron_cpu_optimizer(capsys):
    assert main(["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--cpu-optimizer", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--strategy megatron" in err and "--optimizer-offload" in err


def test_a_megatron_log_states_its_cpu_optimizer():
    """verl's Megatron recipes pass the keys with hydra's ``+``; the log reader takes them from the
    launch command; an FSDP log's are not read (a note)."""
    from polytrace.calibrate.logconfig import _cpu_optimizer_share, _Values
    from polytrace.logs import TrainingLog

    def share(strategy, **cfg):
        printed = {f"{_O}.{k}": v for k, v in cfg.items()}
        log = TrainingLog(path="x.log", format="verl-console", steps=[], printed=printed)
        notes = []
        return _cpu_optimizer_share(_Values(log), strategy, notes), notes

    assert share("megatron", optimizer_cpu_offload=True, optimizer_offload_fraction=1.0) == (1.0, [])
    assert share("megatron", optimizer_cpu_offload=True) == (0.0, [])
    assert share("megatron", optimizer_offload_fraction=0.5) == (0.0, [])
    got, notes = share("fsdp", optimizer_cpu_offload=True, optimizer_offload_fraction=1.0)
    assert got == 0.0 and len(notes) == 1 and "Megatron" in notes[0]
    with pytest.raises(Exception, match="optimizer_offload_fraction"):
        share("megatron", optimizer_cpu_offload=True, optimizer_offload_fraction=3)


def test_a_calibration_carries_its_cpu_optimizer_to_the_estimate():
    from polytrace.calibrate.rundefaults import run_defaults

    doc = {"gpu": "h100", "config": {"cpu_optimizer": 0.5, "cpu_optimizer_overlap": True}}
    got = run_defaults(doc)
    assert got["cpu_optimizer"] == 0.5 and got["cpu_optimizer_overlap"] is True
    for bad in (1.5, -0.1, True, "1"):
        with pytest.raises(Exception, match="config.cpu_optimizer"):
            run_defaults({"gpu": "h100", "config": {"cpu_optimizer": bad}})
