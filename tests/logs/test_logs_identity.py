"""Who ran, as the log shows it: the actor's model (never an unused critic's default path), a
reference/teacher priced as its own model, the accelerator from the log's device names and
platform, companion files (``--config``, wandb run folders) and custom timers (``--stage``).
Logs are written here in the style of public verl logs (``_verl_logs``), never copied."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _verl_logs import Run, step_records, write_log

from polytrace.calibrate.logconfig import Overrides, config_from_log
from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.logs import read_log
from polytrace.run.models import get_model
from polytrace.stepmodel.stages import stage_costs

SMALL = dict(steps=14, prompts=32, n=4, max_response=256, max_prompt=256, micro_per_gpu=4, mini_batch=16)


def printed_config(actor: str, critic: str = "~/models/deepseek-llm-7b-chat", adv: str = "grpo",
                   gpus: int = 8, nnodes: int = 2, batch: int = 32, ref: str | None = None) -> str:
    """verl's pprint of the resolved config: every section with its defaults, the critic's
    included although GRPO runs none."""
    ref_model = f"'model': {{'path': '{ref}'}}, " if ref else ""
    return (
        "(TaskRunner pid=11) {'actor_rollout_ref': {'actor': {'ppo_mini_batch_size': 16,\n"
        "(TaskRunner pid=11)                                   'ppo_micro_batch_size_per_gpu': 4,\n"
        "(TaskRunner pid=11)                                   'strategy': 'fsdp'},\n"
        f"(TaskRunner pid=11)                        'model': {{'path': '{actor}'}},\n"
        f"(TaskRunner pid=11)                        'ref': {{{ref_model}'log_prob_micro_batch_size_per_gpu': 4}},\n"
        "(TaskRunner pid=11)                        'rollout': {'n': 4, 'tensor_model_parallel_size': 1,\n"
        "(TaskRunner pid=11)                                    'response_length': 256}},\n"
        f"(TaskRunner pid=11)  'algorithm': {{'adv_estimator': '{adv}'}},\n"
        f"(TaskRunner pid=11)  'critic': {{'model': {{'path': '{critic}'}}}},\n"
        f"(TaskRunner pid=11)  'data': {{'max_prompt_length': 256, 'max_response_length': 256, "
        f"'train_batch_size': {batch}}},\n"
        f"(TaskRunner pid=11)  'trainer': {{'n_gpus_per_node': {gpus}, 'nnodes': {nnodes}}}}}\n")


ASCEND = ("INFO 06-02 10:00:01 [__init__.py:39] Available plugins for group vllm.platform_plugins:\n"
          "INFO 06-02 10:00:01 [__init__.py:41] - ascend -> vllm_ascend:register\n"
          "INFO 06-02 10:00:01 [__init__.py:232] Platform plugin ascend is activated\n")


def _log(tmp_path, header: str, name: str = "run.log", records=None, **run_kw) -> str:
    run = Run(**{**SMALL, **run_kw})
    return write_log(tmp_path / name, run, header=header, records=records)


# --- the model ---------------------------------------------------------------------------------


def test_grpo_actor_wins_over_the_printed_critic_default_on_ascend(tmp_path):
    """The issue's first case: a GRPO run on 16 NPUs; verl prints the critic's default path, the
    actor is /home/data/Qwen3-32B, and only vllm_ascend lines say what the accelerator is."""
    path = _log(tmp_path, ASCEND + printed_config("/home/data/Qwen3-32B"))
    with pytest.raises(PolytraceError, match=r"Ascend NPUs \('vllm_ascend' at line 2\) but not which; "
                       r"pass --gpu ascend-910b or --gpu ascend-910c"):
        config_from_log(read_log(path))
    run, notes = config_from_log(read_log(path), Overrides(gpu="ascend-910b"))
    assert (run.model.name, run.gpu.slug, run.n_gpus, run.prompts_per_step, run.n) == ("qwen3-32b", "ascend-910b",
                                                                                        16, 32, 4)
    assert run.critic_model is None and not run.use_critic
    assert ("model: qwen3-32b from actor_rollout_ref.model.path in the printed config (/home/data/Qwen3-32B)"
            in notes)
    with pytest.raises(PolytraceError, match=r"--gpu a100: the log shows Ascend NPUs"):
        config_from_log(read_log(path), Overrides(gpu="a100"))


def test_an_unknown_actor_is_an_error_not_the_critic(tmp_path):
    path = _log(tmp_path, printed_config("/home/data/MyOwnNet-13B"))
    with pytest.raises(PolytraceError, match=r"the actor's model '/home/data/MyOwnNet-13B' \(actor_rollout_ref"
                       r"\.model\.path in the printed config\) has no preset"):
        config_from_log(read_log(path), Overrides(gpu="h100"))


def test_a_ppo_critic_path_is_read_only_when_the_critic_runs_and_no_actor_is_named(tmp_path):
    header = ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae data.train_batch_size=32 "
              "critic.model.path=Qwen/Qwen2.5-3B-Instruct actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=8\n")
    run, notes = config_from_log(read_log(_log(tmp_path, header, algo="ppo")), Overrides(gpu="h100"))
    assert run.model.name == "qwen2.5-3b" and run.use_critic
    assert any(n.startswith("model: qwen2.5-3b from the critic's path") for n in notes)
    grpo = _log(tmp_path, header, name="grpo.log")  # the same words, but the steps time no critic
    with pytest.raises(PolytraceError, match="cannot tell the model"):
        config_from_log(read_log(grpo), Overrides(gpu="h100"))


def test_a_teacher_reference_is_priced_as_its_own_model(tmp_path):
    """On-policy distillation: a 3B actor, a 32B reference. The reference pass costs what a 32B
    forward costs: about 32.8 / 3.09 = 10.6x the actor's matmul FLOPs per token."""
    path = _log(tmp_path, printed_config("Qwen/Qwen2.5-3B-Instruct", ref="Qwen/Qwen2.5-32B-Instruct"))
    run, notes = config_from_log(read_log(path), Overrides(gpu="h100"))
    assert run.model.name == "qwen2.5-3b" and run.ref_model.name == "qwen2.5-32b"
    assert any(n.startswith("reference model: qwen2.5-32b") for n in notes)
    p = np.full(64, 200)
    r = np.full(64, 300)
    teacher = stage_costs(run, p, r).seconds["ref"]
    import dataclasses
    own = stage_costs(dataclasses.replace(run, ref_model=None), p, r).seconds["ref"]
    ratio = get_model("qwen2.5-32b").matmul_flops_per_token() / get_model("qwen2.5-3b").matmul_flops_per_token()
    assert 0.5 * ratio < teacher / own < 1.2 * ratio


def test_model_from_the_local_hf_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--acme--Tiny-1B" / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert get_model("acme/Tiny-1B").layers == 16
    run, notes = config_from_log(read_log(_log(tmp_path, printed_config("acme/Tiny-1B"))), Overrides(gpu="h100"))
    assert run.model.hidden == 2048 and any(str(snap / "config.json") in n for n in notes)


# --- the accelerator ---------------------------------------------------------------------------


@pytest.mark.parametrize("line, slug", [
    ("(WorkerDict pid=7) GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1f2e)\n", "rtx4090"),
    ("|   0  NVIDIA H100 80GB HBM3          On  | 00000000:18:00.0 Off |\n", "h100-sxm"),
    ("(WorkerDict pid=7) device name: AMD Instinct MI300X\n", "mi300x"),
    ("(WorkerDict pid=7) [npu] device: Ascend910B3, torch_npu 2.5.1\n", "ascend-910b"),
    ("(WorkerDict pid=7) ROCm 6.2, arch gfx90a\n", "mi250x"),
])
def test_the_log_names_its_accelerator(tmp_path, line, slug):
    path = _log(tmp_path, line + printed_config("Qwen/Qwen3-8B"))
    run, notes = config_from_log(read_log(path))
    assert run.gpu.slug == slug
    assert any(n.startswith(f"GPU: {slug} from") and "line 1" in n for n in notes)
    other = "h200" if slug != "h200" else "h100"
    with pytest.raises(PolytraceError, match=f"--gpu {other}: the log shows"):
        config_from_log(read_log(path), Overrides(gpu=other))


def test_an_accelerator_without_a_preset_is_a_one_line_error(tmp_path, capsys):
    path = _log(tmp_path, "(WorkerDict pid=7) GPU 0: NVIDIA A16\n" + printed_config("Qwen/Qwen3-8B"))
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "accelerator 'NVIDIA A16'" in err and "nearest presets: a10" in err
    assert "a100" not in err.split("nearest")[0]


def test_no_evidence_assumes_an_a100_with_a_note(tmp_path):
    run, notes = config_from_log(read_log(_log(tmp_path, printed_config("Qwen/Qwen3-8B"))))
    assert run.gpu.slug == "a100-80g" and any(n.startswith("GPU not stated in the log: assumed a100-80g")
                                              for n in notes)


# --- companion files ---------------------------------------------------------------------------


def test_markdown_excerpt_with_a_readme_holding_the_launch_command(tmp_path, capsys):
    """TinyZero style: the step lines alone in a markdown page, the launch command in a README."""
    run = Run(**{**SMALL, "gpus_per_node": 1})
    steps = write_log(tmp_path / "tmp.log", run, header="## Training log\n\n```text\n")
    readme = tmp_path / "README.md"
    readme.write_text("# Countdown on one RTX 4090\n\n```bash\nexport N_GPUS=1\nexport BASE_MODEL=Qwen/Qwen2.5-3B\n"
                      "python3 -m verl.trainer.main_ppo data.train_batch_size=32 data.max_prompt_length=256 \\\n"
                      "  data.max_response_length=256 actor_rollout_ref.model.path=$BASE_MODEL \\\n"
                      "  actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=$N_GPUS\n```\n"
                      "Trained on an NVIDIA GeForce RTX 4090.\n")
    with pytest.raises(PolytraceError, match="cannot tell the model from the log"):
        config_from_log(read_log(steps))
    cfg, notes = config_from_log(read_log(steps), Overrides(configs=(str(readme),)))
    assert (cfg.model.name, cfg.gpu.slug, cfg.n_gpus, cfg.prompts_per_step, cfg.n) == ("qwen2.5-3b", "rtx4090",
                                                                                        1, 32, 4)
    assert any(str(readme) in n for n in notes if n.startswith("model:"))
    assert any(n.startswith("GPU: rtx4090") and str(readme) in n for n in notes)
    assert main(["validate", steps, "--config", str(readme)]) == 0


def _wandb_run(tmp_path, model="Qwen/Qwen2.5-7B-Instruct", batch=32, gpu="NVIDIA H100 80GB HBM3") -> str:
    folder = tmp_path / "wandb" / "run-20250601_101010-abc123"
    (folder / "files").mkdir(parents=True)
    write_log(folder / "files" / "output.log", Run(**SMALL), header="wandb: Tracking run with wandb version 0.19\n")
    (folder / "files" / "config.yaml").write_text(
        "_wandb:\n  value:\n    cli_version: 0.19.1\n"
        f"actor_rollout_ref:\n  value:\n    model:\n      path: {model}\n    rollout:\n      n: 4\n"
        "      tensor_model_parallel_size: 2\n"
        f"data:\n  value:\n    train_batch_size: {batch}\n    max_prompt_length: 256\n    max_response_length: 256\n"
        "trainer:\n  value:\n    nnodes: 1\n")
    (folder / "files" / "wandb-metadata.json").write_text(json.dumps({
        "os": "Linux", "python": "3.10.14", "program": "-m verl.trainer.main_ppo", "gpu": gpu, "gpu_count": 8,
        "args": ["algorithm.adv_estimator=grpo", f"data.train_batch_size={batch}"]}))
    return str(folder)


def test_a_wandb_run_folder_reads_output_log_and_its_companions(tmp_path):
    folder = _wandb_run(tmp_path)
    log = read_log(folder)
    assert log.path.endswith("files/output.log")
    cfg, notes = config_from_log(log)
    assert (cfg.model.name, cfg.gpu.slug, cfg.n_gpus, cfg.prompts_per_step, cfg.n, cfg.rollout_tp) == (
        "qwen2.5-7b", "h100-sxm", 8, 32, 4, 2)
    assert any("config.yaml" in n for n in notes if n.startswith("model:"))
    assert any(n.startswith("GPUs per node: 8 from gpu_count in") for n in notes)
    assert log.source_of("data.train_batch_size").startswith(f"{folder}/files/")
    assert log.source_of("actor_rollout_ref.rollout.tensor_model_parallel_size") == f"{folder}/files/config.yaml"


def test_a_companion_of_another_run_is_a_one_line_error(tmp_path, capsys):
    path = _log(tmp_path, printed_config("Qwen/Qwen3-8B"))
    other = tmp_path / "config.yaml"
    other.write_text("actor_rollout_ref:\n  value:\n    model:\n      path: Qwen/Qwen2.5-7B-Instruct\n")
    assert main(["validate", path, "--config", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct" in err
    assert "Qwen/Qwen3-8B" in err and "another run" in err
    batch = tmp_path / "overrides.yaml"  # Hydra's list of overrides
    batch.write_text("- data.train_batch_size=64\n- trainer.n_gpus_per_node=16\n")
    with pytest.raises(PolytraceError, match=r"data.train_batch_size=64 but .* has 32"):
        config_from_log(read_log(path), Overrides(configs=(str(batch),)))
    same = tmp_path / "same.yaml"  # the run's own Hydra overrides agree: accepted
    same.write_text("- data.train_batch_size=32\n- actor_rollout_ref.model.path=/mnt/ckpt/Qwen3-8B\n")
    cfg, _ = config_from_log(read_log(path), Overrides(gpu="h100", configs=(str(same),)))
    assert cfg.prompts_per_step == 32


def test_two_companions_disagreeing_is_an_error(tmp_path):
    folder = _wandb_run(tmp_path, batch=32)
    other = tmp_path / "overrides.yaml"
    other.write_text("- data.train_batch_size=48\n")
    with pytest.raises(PolytraceError,
                       match=r"data.train_batch_size=48 but .*files/(config.yaml|wandb-metadata.json) has 32"):
        read_log(folder, [str(other)])


# --- timers ------------------------------------------------------------------------------------


def _renamed(run: Run, old: str, new: str) -> list[dict]:
    recs = step_records(run)
    for r in recs:
        r["metrics"][new] = r["metrics"].pop(old)
    return recs


def test_a_filtering_rollout_timer_is_read_as_gen_by_default(tmp_path, capsys):
    run = Run(**SMALL)
    recs = _renamed(run, "timing_s/gen", "timing_s/get_batch_rollout_with_filtering")
    path = _log(tmp_path, printed_config("Qwen/Qwen3-8B"), records=recs)
    cfg, notes = config_from_log(log := read_log(path), Overrides(gpu="h100"))
    assert "timer: timing_s/get_batch_rollout_with_filtering read as gen" in " ".join(notes)
    assert [s.timings["gen"] for s in log.steps] == pytest.approx(
        [r["metrics"]["timing_s/get_batch_rollout_with_filtering"] for r in recs], rel=1e-3)
    assert main(["validate", path, "--gpu", "h100"]) == 0


def test_stage_flag_maps_a_custom_timer_and_an_unknown_one_lists_the_timers(tmp_path, capsys):
    run = Run(**SMALL)
    recs = _renamed(run, "timing_s/gen", "timing_s/my_agent_rollout")
    path = _log(tmp_path, printed_config("Qwen/Qwen3-8B"), records=recs)
    assert main(["validate", path, "--gpu", "h100"]) == 2
    assert "no timing/gen" in capsys.readouterr().err
    assert main(["validate", path, "--gpu", "h100", "--stage", "gen=timing_s/my_agent_rollout"]) == 0
    assert "note: timer: timing_s/my_agent_rollout read as gen (--stage)" in capsys.readouterr().out
    assert main(["validate", path, "--gpu", "h100", "--stage", "gen=timing_s/rollout_typo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no timer timing_s/rollout_typo" in err
    assert "timing_s/my_agent_rollout" in err and "timing_s/update_actor" in err
    assert main(["validate", path, "--gpu", "h100", "--stage", "generation=timing_s/my_agent_rollout"]) == 2
    assert "unknown stage 'generation'" in capsys.readouterr().err


def test_a_multimodal_model_config_printed_by_transformers_is_read(tmp_path):
    """A GUI-agent run: the actor is a local Qwen3-VL checkpoint no preset names; transformers
    prints its config with the language model nested in ``text_config``."""
    lines = ['{', '  "model_type": "qwen3_vl",', '  "text_config": {', '    "head_dim": 128,',
             '    "hidden_size": 2048,', '    "intermediate_size": 6144,', '    "num_attention_heads": 16,',
             '    "num_hidden_layers": 28,', '    "num_key_value_heads": 8,', '    "tie_word_embeddings": true,',
             '    "vocab_size": 151936', '  },', '  "vision_config": {', '    "depth": 24,', '    "hidden_size": 1024',
             '  }', '}']
    printed = "(WorkerDict pid=9) Model config after override: Qwen3VLConfig {\n" + "".join(
        f"(WorkerDict pid=9) {x}\n" for x in lines[1:])
    path = _log(tmp_path, printed_config("/mnt/models/Qwen/Qwen3-VL-2B-Thinking") + printed)
    run, notes = config_from_log(read_log(path), Overrides(gpu="h100"))
    assert (run.model.name, run.model.layers, run.model.hidden, run.model.kv_heads) == ("Qwen3-VL-2B-Thinking", 28,
                                                                                         2048, 8)
    assert any("read from the model config printed in the log (language model only" in n for n in notes)


@pytest.mark.parametrize("path, preset", [
    ("/ckpt/multiturn-sft-qwen-2.5-3b-instruct/global_step_372/huggingface", "qwen2.5-3b"),
    ("JoeYing/ReTool-DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"),
    ("/data0/checkpoint/Qwen3-4B-RA-SFT", "qwen3-4b"),
])
def test_fine_tuned_checkpoints_map_to_their_base(path, preset):
    from polytrace.calibrate.identity import guess_model
    assert guess_model(path).name == preset


@pytest.mark.parametrize("name, text, message", [
    ("config.yaml", "actor_rollout_ref: [unclosed\n", r"config.yaml:\d+: not readable YAML"),
    ("wandb-metadata.json", '{"gpu": "NVIDIA H100", "gpu_count": "eight"}', "gpu_count is 'eight'"),
    ("wandb-metadata.json", "{not json", "not readable JSON"),
    ("overrides.yaml", "- 12\n", "expected override strings"),
    ("notes.md", "nothing about the run here\n", "holds no launch command"),
])
def test_bad_companion_files_are_one_line_errors(tmp_path, capsys, name, text, message):
    path = _log(tmp_path, printed_config("Qwen/Qwen3-8B"))
    bad = tmp_path / name
    bad.write_text(text)
    assert main(["validate", path, "--gpu", "h100", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("polytrace: error:")
    import re
    assert re.search(message, err), err


def test_a_readme_of_another_batch_is_refused_by_the_metrics(tmp_path, capsys):
    """The log states no batch; a README states 64 prompts x 4, but every step's
    perf/total_num_tokens / (prompt + response mean) counts 32 x 4 = 128 sequences."""
    steps = write_log(tmp_path / "tmp.log", Run(**SMALL), header="## Training log\n\n```text\n")
    readme = tmp_path / "README.md"
    command = ("python3 -m verl.trainer.main_ppo data.train_batch_size={b} actor_rollout_ref.rollout.n=4 "
               "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B trainer.n_gpus_per_node=8\n")
    readme.write_text(command.format(b=64))
    assert main(["validate", steps, "--gpu", "h100", "--config", str(readme)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "states 64 prompts x 4 responses = 256 sequences" in err
    assert "hold about 128" in err and "another run" in err
    readme.write_text(command.format(b=32))  # the run's own command: accepted
    cfg, _ = config_from_log(read_log(steps), Overrides(gpu="h100", configs=(str(readme),)))
    assert (cfg.prompts_per_step, cfg.n) == (32, 4)
    readme.write_text(command.format(b=64))  # the user's own --prompts is not second-guessed
    cfg, _ = config_from_log(read_log(steps), Overrides(gpu="h100", prompts=32, configs=(str(readme),)))
    assert cfg.prompts_per_step == 32


def test_config_and_stage_are_refused_with_stage_times(capsys):
    args = ["calibrate", "--stage-times", "gen=1,update_actor=2", "--model", "qwen3-8b", "--gpu", "h100", "--gpus",
            "8", "-o", "unused.json"]
    assert main(args + ["--stage", "gen=timing_s/x"]) == 2
    assert main(args + ["--config", "wandb-metadata.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("--stage-times has neither") == 2
