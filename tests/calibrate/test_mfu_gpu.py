"""The GPU a log ran on, read back from its own ``perf/mfu/actor`` (``calibrate/mfu.py``).

verl divides the update's FLOPs by the peak of the device it detected; the peak comes back from
the MFU, the tokens and the update's seconds. Checked on the shared logs whose GPU their publishers
state (play-verl and dstack: H100; the OPD runs: A800, wandb metadata; verl-on-gke: B200, its
README), by hand on one step, and for the notes: an assumed GPU replaced, a given one contradicted."""

from __future__ import annotations

import pytest

from polytrace.calibrate.gpuinfer import INFERRED_NOTE
from polytrace.calibrate.logconfig import Overrides, config_from_log
from polytrace.calibrate.mfu import check_gpu, read_mfu
from polytrace.calibrate.validate import prepare
from polytrace.logs import read_log
from polytrace.run.hardware import get_gpu

LADDER_05B = "ladder/Qwen2.5-0.5B-bsz64_2-prompt512-resp1024-lorarank32-score0.543.log"
# publisher-stated GPU -> verl's peak class (TFLOP/s) and the preset priced
KNOWN = {
    "verl_qwen2-7b_ppo_8gpu_b1024x5.log": (989.0, "h100-sxm"),  # play-verl README: 8x H100-80GB
    "verl_qwen2-7b_ppo_8gpu_b512x1.log": (989.0, "h100-sxm"),
    "verl_qwen2.5-0.5b_grpo_8gpu_n2_dynbsz.log": (989.0, "h100-sxm"),
    "verl_qwen2.5-0.5b_ppo_8gpu_b2048.log": (989.0, "h100-sxm"),
    "verl_qwen2.5-7b_ppo_16gpu_resumed.log": (989.0, "h100-sxm"),  # dstack's h100-fleet.yml
    "more/verl-on-gke_b200_vllm0.11_parsed_metrics.csv": (2250.0, "b200"),  # esaaren/verl-on-gke: 16 B200s
}


def _reading(validation_logs, name):
    log = read_log(validation_logs / name)
    run, _ = config_from_log(log)
    return read_mfu(log, run)


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_mfu_reads_back_the_publishers_gpu(validation_logs, name):
    peak, preset = KNOWN[name]
    r = _reading(validation_logs, name)
    assert (r.verl_class, r.choice) == (peak, preset)
    # offload outside verl's timer only lowers the read-back peak: never above verl's own
    assert r.peak_tflops <= peak * 1.01


def test_the_a800_runs_read_their_class_and_agree_with_their_metadata(validation_logs):
    for name in ("verl_opd-retool_qwen2.5-3b_teacher32b_4gpu", "verl_opd-retool_qwen3-4b_teacher32b_4gpu"):
        r = _reading(validation_logs, f"more/{name}.output.log")
        assert r.verl_class == 312.0 and "a800-40g" in r.candidates
        assert check_gpu(r, get_gpu("a800-40g")) is None  # the metadata's A800-SXM4-40GB: no note


def test_one_step_by_hand(validation_logs):
    """step:1 of the 0.5B rung: tokens 140589, update 6.447 s, MFU 0.045 on 2 GPUs; Qwen2.5-0.5B:
    24 layers, hidden 896, 14 heads of 64, 2 KV heads, MLP 4864, vocab 151936 (qkv bias 1152 per
    layer); mean length 108.062 + 331.278 over 320 sequences; attention coefficient 9 (verl's 6-12)."""
    log = read_log(validation_logs / LADDER_05B)
    log.steps = log.steps[:1]
    run, _ = config_from_log(log)
    dense = 24 * (896 * (896 + 128 + 128 + 896) + 1152 + 3 * 896 * 4864) + 2 * 151936 * 896
    flops = 6 * dense * 140589 + 9 * 320 * (108.062 + 331.278) ** 2 * 64 * 14 * 24
    expected = flops / (6.447 * 0.045 * 2) / 1e12
    assert read_mfu(log, run).peak_tflops == pytest.approx(expected, rel=1e-9)


def test_a_log_without_mfu_reads_nothing(validation_logs):
    assert _reading(validation_logs, "verl_gemma-2-2b_ppo_2gpu_p1024_r512.log") is None


def test_an_assumed_gpu_is_replaced_by_the_mfu_class_with_a_note(validation_logs):
    _log, run, notes, _rows, _split = prepare(validation_logs / LADDER_05B)
    assert run.gpu.slug == "h100-sxm"
    note = next(n for n in notes if n.startswith(INFERRED_NOTE))
    assert "from the log's own MFU" in note and "989 TFLOP/s class" in note and "h200" in note
    assert not any(n.startswith("GPU not stated in the log: assumed") for n in notes)


def test_a_given_gpu_that_the_mfu_contradicts_is_kept_with_a_note_naming_both(validation_logs):
    _log, run, notes, _rows, _split = prepare(validation_logs / "verl_qwen2-7b_ppo_8gpu_b1024x5.log",
                                              Overrides(gpu="a100-80g"))
    assert run.gpu.slug == "a100-80g"  # priced as given, never silently switched
    check = [n for n in notes if n.startswith("GPU check:")]
    assert len(check) == 1 and "a100-80g (312 TFLOP/s in verl's table)" in check[0] and "989 TFLOP/s class" in check[0]


def test_a_given_gpu_the_mfu_agrees_with_adds_no_note(validation_logs):
    _log, run, notes, _rows, _split = prepare(validation_logs / "verl_qwen2-7b_ppo_8gpu_b1024x5.log",
                                              Overrides(gpu="h100-sxm"))
    assert run.gpu.slug == "h100-sxm" and not any(n.startswith("GPU check:") for n in notes)
