"""The December 2026 additions to the shared logs (``validation-logs/ladder`` and ``more/``), each
read into the ``TrainingLog`` record with no flag: its steps, the first step's timings, and the
run's identity (model, GPUs, prompts per step, responses per prompt).

Expected values are written from each file's own text (the launch command, the metric line of its
first step, ``ladder/PROVENANCE.md``), quoted beside each row, not from the code's output."""

from __future__ import annotations

import pytest

from polytrace.calibrate.logconfig import config_from_log
from polytrace.logs import read_log

LADDER = "ladder/"
MORE = "more/"
# ladder/PROVENANCE.md: model, GPUs; every ladder run: GRPO, "64 prompts x 5 responses a step",
# steps 1-40 transcribed. gen: ``timing_s/gen`` of each file's ``step:1`` line.
LADDER_RUNS = {
    "Qwen2.5-0.5B-bsz64_2-prompt512-resp1024-lorarank32-score0.543.log": ("qwen2.5-0.5b", 2, 50.519),
    "Qwen2.5-1.5B-bsz64_2-prompt512-resp1024-lorarank32-score0.779.log": ("qwen2.5-1.5b", 2, None),
    "Qwen2.5-3B-bsz64_2-prompt512-resp1024-lorarank32-score0.861.log": ("qwen2.5-3b", 2, None),
    "Qwen2.5-7B-bsz64_8-prompt512-resp1024-lorarank32-score0.934.log": ("qwen2.5-7b", 8, None),
    "Qwen2.5-32B-bsz64_8-prompt512-resp1024-lorarank32-score0.958.log": ("qwen2.5-32b", 8, None),
    "math__Qwen2.5-0.5B-bsz64_2-prompt1024-resp512-score0.3141.log": ("qwen2.5-0.5b", 2, None),
    "math__Qwen2.5-1.5B-bsz64_2-prompt1024-resp512-score0.5018.log": ("qwen2.5-1.5b", 2, None),
    "math__Qwen2.5-3B-bsz64_2-prompt1024-resp512-score0.5702.log": ("qwen2.5-3b", 2, None),
    "math__Qwen2.5-7B-bsz64_8-prompt1024-resp512-score0.6513.log": ("qwen2.5-7b", 8, None),
    "math__Qwen2.5-32B-bsz64_8-prompt1024-resp512-score0.6985.log": ("qwen2.5-32b", 8, None),
}


def test_the_ladder_is_complete(validation_logs):
    assert sorted(p.name for p in (validation_logs / "ladder").glob("*.log")) == sorted(LADDER_RUNS)


@pytest.mark.parametrize("name", sorted(LADDER_RUNS))
def test_each_ladder_rung_reads_steps_1_to_40_and_its_identity(validation_logs, name):
    model, gpus, gen1 = LADDER_RUNS[name]
    log = read_log(validation_logs / "ladder" / name)
    # the transcription's first line ("# transcribed from ...") and its gap markers are not steps
    assert [s.step for s in log.steps] == list(range(1, 41))
    assert {"gen", "old_log_prob", "ref", "update_actor", "step"} <= set(log.steps[0].timings)
    if gen1 is not None:
        assert log.steps[0].timings["gen"] == gen1
    run, _notes = config_from_log(log)
    assert (run.model.name, run.n_gpus, run.prompts_per_step, run.n) == (model, gpus, 64, 5)


def test_the_0p5b_rung_reads_its_first_step_verbatim(validation_logs):
    """step:1 of the 0.5B GSM8K rung: ``timing_s/update_actor:6.447 - timing_s/step:59.794 -
    perf/mfu/actor:0.045 ... perf/throughput:1175.609``."""
    name = "Qwen2.5-0.5B-bsz64_2-prompt512-resp1024-lorarank32-score0.543.log"
    s = read_log(validation_logs / LADDER / name).steps[0]
    assert (s.timings["update_actor"], s.timings["step"]) == (6.447, 59.794)
    assert (s.metrics["perf/mfu/actor"], s.metrics["perf/throughput"]) == (0.045, 1175.609)
    assert s.metrics["perf/max_memory_allocated_gb"] == 26.377


def test_the_megatron_gpg_log(validation_logs):
    """``step:1 ... timing_s/gen:51.509 ... timing_s/update_actor:117.292``; steps 1-105; the
    printed config's ``actor_rollout_ref.actor.strategy: megatron``; 8 GPUs, 1024 prompts x 5."""
    log = read_log(validation_logs / MORE / "verl_qwen2-7b_gpg_megatron_8gpu.log")
    assert [s.step for s in log.steps] == list(range(1, 106))
    assert (log.steps[0].timings["gen"], log.steps[0].timings["update_actor"]) == (51.509, 117.292)
    assert log.config["actor_rollout_ref.actor.strategy"] == "megatron"
    run, _ = config_from_log(log)
    assert (run.model.name, run.n_gpus, run.prompts_per_step, run.n) == ("qwen2-7b", 8, 1024, 5)


# the two on-policy distillation runs: overrides.yaml "data.train_batch_size=32", the actor's path
# (an SFT checkpoint of the named model), wandb-metadata.json "gpu": "NVIDIA A800-SXM4-40GB",
# "gpu_count": 8 (the host; the run's trainer.n_gpus_per_node is 4). Steps logged with timings:
# every ``step:N`` line but those wandb cut at 4096 characters (validation steps, every 10th).
OPD = {
    "verl_opd-retool_qwen2.5-3b_teacher32b_4gpu": ("qwen2.5-3b", 238),
    "verl_opd-retool_qwen3-4b_teacher32b_4gpu": ("qwen3-4b", 261),
}


@pytest.mark.parametrize("run_name", sorted(OPD))
def test_each_distillation_run_reads_its_companions_by_name(validation_logs, run_name):
    model, last = OPD[run_name]
    log = read_log(validation_logs / MORE / f"{run_name}.output.log")
    assert log.steps[0].step == 1 and log.steps[-1].step == last
    assert log.host_gpus[0] == 8 and log.host_gpus[1].endswith(f"{run_name}.wandb-metadata.json")
    assert any("companion file(s) named after the log" in n and f"{run_name}.overrides.yaml" in n for n in log.notes)
    cut = next(n for n in log.notes if "cut at 4096 characters" in n)
    assert "10, 20, 30, 40" in cut
    assert all(s.step % 10 for s in log.steps[:30])  # the cut (validation) steps are left out, not mispriced
    run, notes = config_from_log(log)
    assert (run.model.name, run.n_gpus, run.prompts_per_step, run.n) == (model, 4, 32, 16)
    assert run.gpu.slug == "a800-40g"


def test_the_b200_csv_reads_its_readme_launch_command(validation_logs):
    """``parsed_metrics.csv``: 57 rows (steps 1-57), ``timing_s/gen`` of step 1 312.51...; the
    README's command: Qwen/Qwen2.5-32B-Instruct, trainer.nnodes=2 x 8 GPUs, 256 prompts x 8."""
    log = read_log(validation_logs / MORE / "verl-on-gke_b200_vllm0.11_parsed_metrics.csv")
    assert log.format == "wandb-csv"
    assert [s.step for s in log.steps] == list(range(1, 58))
    assert log.steps[0].timings["gen"] == pytest.approx(312.5102138559996, rel=1e-15)
    assert log.companion_files[0].endswith("verl-on-gke_b200_vllm0.11.README.md")
    run, _ = config_from_log(log)
    assert (run.model.name, run.n_gpus, run.prompts_per_step, run.n) == ("qwen2.5-32b", 16, 256, 8)


def test_the_getting_started_notebook_reads_its_printed_steps(validation_logs):
    """The notebook's training cell prints steps 0-60 of a 1-GPU PPO run of Qwen2.5-0.5B-Instruct
    with 256 prompts (its cell's own command)."""
    log = read_log(validation_logs / MORE / "verl_getting-started_notebook.ipynb")
    assert [s.step for s in log.steps] == list(range(0, 61))
    assert any(n.startswith("read notebook cell") for n in log.notes)
    run, _ = config_from_log(log)
    assert (run.model.name, run.n_gpus, run.prompts_per_step, run.n) == ("qwen2.5-0.5b", 1, 256, 1)


def test_a_sibling_of_another_run_is_an_error_naming_both(tmp_path, validation_logs):
    """Files named after the log that state different batches belong to different runs: an error
    naming both, not a silent choice."""
    from polytrace.errors import PolytraceError

    src = validation_logs / MORE / "verl_opd-retool_qwen2.5-3b_teacher32b_4gpu.output.log"
    log = tmp_path / "run.output.log"
    log.write_bytes(src.read_bytes())
    (tmp_path / "run.config.yaml").write_text("data:\n  train_batch_size: 32\n")
    (tmp_path / "run.overrides.yaml").write_text("- data.train_batch_size=64\n")
    with pytest.raises(PolytraceError,
                       match=r"run.overrides.yaml: data.train_batch_size=64 but .*run.config.yaml has 32"):
        read_log(log)
