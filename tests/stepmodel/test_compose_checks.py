"""Configurations that cannot run are refused before any work, one line each with the nearest
choice that runs: a rollout TP that does not split the attention heads (vLLM's rule), more
data-parallel ranks than sequences, a training state larger than the GPU. Warnings come before the
tables they qualify."""

from __future__ import annotations

import pytest

from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.run.models import get_model
from polytrace.stepmodel.checks import tp_splits_heads, valid_rollout_tps
from polytrace.stepmodel.estimate import build_config, estimate
from polytrace.workload.profiles import get_profile


def test_vllm_head_rule():
    m32 = get_model("qwen2.5-32b")  # 40 heads, 8 KV heads
    assert (m32.heads, m32.kv_heads) == (40, 8)
    assert [t for t in range(1, 41) if tp_splits_heads(m32, t)] == [1, 2, 4, 8, 40]  # 5, 10, 20: KV heads split
    m7 = get_model("qwen2.5-7b")  # 28 heads, 4 KV heads: TP 7 divides the heads but not the KV heads
    assert [t for t in range(1, 29) if tp_splits_heads(m7, t)] == [1, 2, 4, 28]
    assert valid_rollout_tps(m32, 12) == [1, 2, 4]


def _one_line(capsys, argv, needle):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("polytrace: error:") and needle in captured.err, captured.err


def test_rollout_tp_that_does_not_split_the_heads_is_refused_with_the_nearest(capsys):
    base = ["estimate", "--model", "qwen2.5-32b", "--gpu", "h100"]
    _one_line(capsys, base + ["--gpus", "3", "--rollout-tp", "3"], "--rollout-tp 3: qwen2.5-32b's 40 attention heads")
    _one_line(capsys, base + ["--gpus", "12", "--rollout-tp", "3"], "use --rollout-tp 2")
    _one_line(capsys, base + ["--gpus", "12", "--rollout-tp", "6"], "use --rollout-tp 4")


def test_the_chosen_tp_always_splits_the_heads():
    """3 GPUs never give TP 3 for a 40-head model; 12 GPUs of a model that needs TP > 1 get 2 or 4."""
    prof = get_profile("dapo-math-32b")
    for gpus in (3, 6, 12, 24):
        cfg = build_config(prof, "qwen2.5-7b", "h100", gpus)
        assert tp_splits_heads(cfg.model, cfg.rollout_tp) and gpus % cfg.rollout_tp == 0, (gpus, cfg.rollout_tp)
    cfg = build_config(prof, "qwen2.5-32b", "h100", 12)
    assert cfg.rollout_tp in (2, 4)


def test_more_ranks_than_sequences_is_refused_before_any_sampling(capsys, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("sampled batches for a configuration that should have been refused")

    from polytrace.workload.profiles.profile import Profile

    monkeypatch.setattr(Profile, "sample", no_work)
    # dapo-math-32b: 96 prompts x 8 = 768 sequences per step
    _one_line(capsys, ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "1000000"],
              "use --gpus 768 or fewer")
    _one_line(capsys, ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "769"], "769 data-parallel")
    with pytest.raises(PolytraceError, match="use --gpus 32 or fewer"):
        estimate("dapo-math-32b", "qwen2.5-7b", "h100", 64, prompts=4)  # 4 x 8 = 32 sequences
    with pytest.raises(PolytraceError, match="use --gpus 64 or fewer"):  # Megatron: TP x PP GPUs per rank
        estimate("dapo-math-32b", "qwen2.5-7b", "h100", 128, prompts=4, strategy="megatron", train_tp=2)


def test_training_state_beyond_memory_is_an_error_naming_the_gpus_where_it_fits(capsys):
    _one_line(capsys, ["estimate", "--model", "qwen2.5-32b", "--gpu", "a100-80g", "--gpus", "2"],
              "training state is 297 GB per GPU on a 80 GB a100-80g")
    with pytest.raises(PolytraceError, match="use --gpus 8 or more") as exc:
        estimate("dapo-math-32b", "qwen2.5-32b", "a100-80g", 2)
    assert "--gpus 2:" in str(exc.value)
    # the GPU count named is the nearest that fits: 6 still does not, 8 does (a warning about
    # activations remains, the state itself fits)
    with pytest.raises(PolytraceError, match="training state"):
        estimate("dapo-math-32b", "qwen2.5-32b", "a100-80g", 6)
    res = estimate("dapo-math-32b", "qwen2.5-32b", "a100-80g", 8)
    assert res.memory["training_state_total"] < 80


def test_warnings_come_before_the_report_tables(tmp_path, capsys):
    assert main(["report", "--model", "qwen2.5-32b", "--gpu", "h100", "--gpus", "8", "--step", "0",
                 "-o", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    first_warning = out.index("warning: training needs")
    assert first_warning < out.index("estimated RL step:") < out.index("tokens / s / GPU")
    assert "Two tail figures" not in out  # the long note only with --explain
    assert main(["report", "--step", "0", "-o", str(tmp_path / "r2"), "--explain"]) == 0
    assert "Two tail figures answer two questions" in capsys.readouterr().out
