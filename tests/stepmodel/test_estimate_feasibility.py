"""``polytrace estimate`` refuses setups that cannot run, warns about ones that need unpriced help
(offload), and reports the per-GPU memory and KV-cache capacity behind both."""

from __future__ import annotations

import json

import pytest

from polytrace.cli import main
from polytrace.stepmodel import estimate, report_section

FEASIBLE = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--profile", "dapo-math-32b"]
# 32B on 8 x 80 GB under FSDP: 16 bytes of fp32 state per parameter / 8 = 66 GB before the
# reference weights and activations; the rollout share of 40 GB comes on top of the kept state.
OVERSIZED = ["estimate", "--model", "qwen2.5-32b", "--gpu", "h100", "--gpus", "8", "--profile", "dapo-math-32b"]


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("polytrace: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("extra, expected", [
    # a sequence cannot be split across micro-batches (verl asserts the same)
    (["--micro-batch-tokens", "1"], "--micro-batch-tokens 1 is smaller than the longest sequence"),
    # an inference engine needs whole GPUs
    (["--rollout-tp", "3"], "--rollout-tp 3 does not divide --gpus 8"),
    (["--strategy", "megatron", "--train-tp", "3"], "--train-tp 3 x --train-pp 1 does not divide --gpus 8"),
    (["--mem-fraction", "1.5"], "--mem-fraction must be in [0.05, 0.99]"),
])
def test_error_names_the_flag(capsys, extra, expected):
    assert expected in _error(capsys, FEASIBLE + extra)


def test_weights_that_fit_nowhere_are_an_error(capsys):
    # 72.7B x 2 bytes = 145 GB of bf16 weights against a 70 GB engine share of one H200
    line = _error(capsys, ["estimate", "--model", "qwen2.5-72b", "--gpu", "h200", "--gpus", "1"])
    assert "even at rollout TP 1" in line and "use --gpus 4 (rollout TP 4) or raise --mem-fraction" in line


def test_rollout_tp_without_kv_room_is_an_error_naming_the_fix(capsys):
    # 65.5 GB of weights at TP 1 exceed the 40 GB share; TP 2 leaves ~5 GB, room for ~79k tokens
    line = _error(capsys, OVERSIZED + ["--rollout-tp", "1"])
    assert line.startswith("polytrace: error: --rollout-tp 1:") and "use --rollout-tp 2 or more" in line
    # the default TP is chosen to fit, so the same setup without the flag runs
    assert estimate("dapo-math-32b", "qwen2.5-32b", "h100", 8).config["rollout_tp"] >= 2


def test_micro_batch_budget_boundary_is_the_longest_sequence():
    res = estimate("deepcoder-14b", "deepcoder-14b", "h200", 8, prompts=4)
    longest = res.memory["longest_sequence"]
    assert longest > 16384  # the sampled batch holds a sequence longer than verl's default budget
    # the default budget rises to max prompt + max response (2048 + 16000, rounded up to 1024)
    assert res.config["micro_batch_tokens"] == 18432 >= longest
    assert estimate("deepcoder-14b", "deepcoder-14b", "h200", 8, prompts=4, micro_batch_tokens=longest).rows
    from polytrace.errors import PolytraceError

    with pytest.raises(PolytraceError, match=f"--micro-batch-tokens {longest - 1} is smaller"):
        estimate("deepcoder-14b", "deepcoder-14b", "h200", 8, prompts=4, micro_batch_tokens=longest - 1)


def test_feasible_default_has_no_warnings_and_reports_memory(capsys):
    assert main(FEASIBLE) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "memory per GPU (estimated, GB of 80)" in out and "KV capacity" in out and "step s" in out
    res = estimate("dapo-math-32b", "qwen2.5-7b", "h100", 8)
    assert res.warnings == []
    mem = res.memory
    assert mem["train_peak"] < 80 and mem["rollout_peak"] < 80 and mem["kv_capacity_tokens"] > 0


def test_oversized_training_state_warns_and_still_estimates(capsys):
    assert main(OVERSIZED) == 0
    out, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert any("training needs" in w and "offload" in w for w in warnings), err
    assert any("rollout needs" in w and "--mem-fraction" in w for w in warnings), err
    assert "step s" in out and "update_actor s" in out  # the estimate is still printed

    assert main(OVERSIZED + ["--json"]) == 0
    out, err = capsys.readouterr()
    res = json.loads(out)
    assert len(res["warnings"]) == 2 and res["summary"]["mean_step_s"] > 0
    assert res["memory"]["training_state_total"] > 66
    assert [f"warning: {w}" for w in res["warnings"]] == err.strip().splitlines()


def test_lower_mem_fraction_clears_the_rollout_warning():
    # the same 32B setup with a 20% engine share: 57 GB kept + 16 GB share < 80 GB
    res = estimate("dapo-math-32b", "qwen2.5-32b", "h100", 8, mem_fraction=0.2, rollout_tp=8)
    assert not any("rollout needs" in w for w in res.warnings)
    assert any("training needs" in w for w in res.warnings)


def test_report_section_carries_warnings_and_keeps_its_keys():
    sec = report_section("dapo-math-32b", "qwen2.5-32b", "h100", 8, steps=[0])
    assert {"profile", "config", "source", "rows", "summary"} <= set(sec)
    assert len(sec["warnings"]) == 2
    assert report_section("search-r1-7b", "qwen2.5-7b", "h100", 8, steps=[0], prompts=8)["warnings"] == []


def test_memory_breakdown_matches_hand_computation():
    # Qwen2.5-0.5B: 24 layers, hidden 896, MLP 4864, 14 heads, 2 KV heads of 64, vocab 151936,
    # tied embeddings, QKV bias.
    attn = 896 * 896 + 2 * 896 * 2 * 64 + 896 * 896 + (14 + 2 * 2) * 64
    layer = attn + 3 * 896 * 4864
    params = 24 * layer + 151936 * 896
    assert params == 493_988_864  # the published 0.49B
    gpus, tokens, gb = 2, 8192, 1e9
    res = estimate("search-r1-7b", "qwen2.5-0.5b", "h100", gpus, prompts=8, micro_batch_tokens=tokens)
    mem = res.memory
    state = mem["training_state"]
    # FSDP: fp32 master, fp32 grads, two fp32 Adam moments sharded over 2 GPUs; two gathered bf16 layers
    assert state["actor_master_fp32"] == pytest.approx(4 * params / gpus / gb)
    assert state["actor_adam_moments"] == pytest.approx(8 * params / gpus / gb)
    assert state["actor_gradients"] == pytest.approx(4 * params / gpus / gb)
    assert state["actor_weights_bf16"] == pytest.approx(2 * 2 * layer / gb)
    assert state["ref_weights_bf16"] == pytest.approx(2 * params / gpus / gb)
    # checkpointed layer inputs + one layer's full set + bf16 logits and fp32 log-softmax
    per_token = 24 * 2 * 896 + 2 * (8 * 896 + 2 * 2 * 64 + 3 * 4864) + 6 * 151936
    assert per_token == 998_656
    assert mem["activations"] == pytest.approx(tokens * per_token / gb)
    assert mem["activation_tokens"] == tokens
    # rollout at TP 1: bf16 weights, 2 GB reserve, the rest of 0.5 x 80 GB is KV cache
    assert res.config["rollout_tp"] == 1
    assert mem["rollout_weights"] == pytest.approx(2 * params / gb)
    kv = 0.5 * 80e9 - 2 * params - 2e9
    assert mem["kv_cache"] == pytest.approx(kv / gb)
    kv_per_token = 2 * 24 * 2 * 64 * 2  # K and V, layers, KV heads, head dim, bf16
    assert mem["kv_bytes_per_token"] == kv_per_token
    assert mem["kv_capacity_tokens"] == int(kv // kv_per_token)
    assert mem["rollout_resident"] == pytest.approx((12 * params / gpus + 2 * params / gpus) / gb)
    assert res.warnings == []


def test_everything_offloaded_leaves_nothing_resident_and_prints(capsys):
    """A Megatron trainer with its parameters and optimizer offloaded and no reference keeps
    nothing on the GPUs during the rollout: 0.0 GB, printed (an empty sum was the integer 0, which
    the memory report dropped as no float, and the text report raised a KeyError traceback)."""
    assert main(["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--strategy", "megatron",
                 "--train-tp", "2", "--param-offload", "--optimizer-offload", "--no-ref"]) == 0
    out = capsys.readouterr().out
    assert "rollout: trainer kept 0.0 + weights" in out
