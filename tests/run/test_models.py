"""Model presets and the HF config reader."""

from __future__ import annotations

import json

import pytest

from polytrace.errors import PolytraceError
from polytrace.run.models import find_model, from_hf_config, get_model, list_models

REQUIRED = ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b",
            "qwen2.5-72b", "qwen2-7b", "qwen3-8b", "qwen3-30b-a3b", "deepseek-llm-7b", "gemma-2-2b",
            "llama-3.1-8b", "llama-3.1-70b"]


def test_required_presets_present_with_sources():
    names = list_models()
    for n in REQUIRED:
        assert n in names
        assert "/" in get_model(n).source  # a Hub repo id


@pytest.mark.parametrize("name, params", [
    # parameter counts the frameworks print when loading these models (verl logs in
    # ../shared/validation-logs: "Qwen2ForCausalLM contains 494.03M parameters",
    # "Gemma2ForCausalLM contains 2.61B parameters"), and the model cards' totals
    ("qwen2.5-0.5b", 494.03e6), ("gemma-2-2b", 2.61e9), ("qwen2.5-7b", 7.62e9),
    ("llama-3.1-8b", 8.03e9), ("qwen3-30b-a3b", 30.5e9), ("qwen2.5-72b", 72.7e9),
    # model cards: Qwen3 0.6B/4B/14B/32B (0.6, 4.0, 14.8, 32.8B), Llama 3.2 1B (1.24B), Mistral-Small-24B
    # (23.6B), Ministral-8B (8.02B), gemma-2-9b (9.24B), gpt-oss-20b / 120b (21B / 117B), DeepSeek-V3 (671B)
    ("qwen3-0.6b", 0.6e9), ("qwen3-4b", 4.02e9), ("qwen3-14b", 14.8e9), ("qwen3-32b", 32.8e9),
    ("llama-3.2-1b", 1.24e9), ("mistral-small-24b", 23.6e9), ("ministral-8b", 8.02e9), ("gemma-2-9b", 9.24e9),
    ("gpt-oss-20b", 20.9e9), ("gpt-oss-120b", 116.8e9), ("deepseek-v3", 671e9),
])
def test_parameter_counts_match_published_totals(name, params):
    assert get_model(name).params_total == pytest.approx(params, rel=0.01)


@pytest.mark.parametrize("name, active", [
    # model cards: gpt-oss-20b 3.6B active, gpt-oss-120b 5.1B, DeepSeek-V3 37B, Qwen3-235B-A22B 22B
    ("gpt-oss-20b", 3.6e9), ("gpt-oss-120b", 5.1e9), ("deepseek-v3", 37e9), ("qwen3-235b-a22b", 22e9),
])
def test_moe_active_parameters_match_model_cards(name, active):
    assert get_model(name).params_active == pytest.approx(active, rel=0.03)


def test_mla_caches_the_latent_not_heads():
    """DeepSeek-V3 caches kv_lora_rank + rope dims (512 + 64) per layer: 61 x 576 x 2 bytes = 70 kB a
    token, the same on every tensor-parallel rank; its own config.json read back gives the preset."""
    m = get_model("deepseek-v3")
    assert m.kv_bytes_per_token() == 61 * 576 * 2
    assert m.kv_bytes_per_token_per_gpu(8) == m.kv_bytes_per_token()
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
           "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
           "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
           "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
           "v_head_dim": 128, "vocab_size": 129280, "tie_word_embeddings": False}
    read = from_hf_config(cfg, name="dsv3")
    assert read.params_total == m.params_total and read.kv_bytes_per_token() == m.kv_bytes_per_token()


@pytest.mark.parametrize("name, moe_layers, tensors", [
    # DeepSeek-V3: 58 of its 61 layers routed (first_k_dense_replace 3), 256 experts; NeMo RL counts
    # 45,395 tensors per vLLM rank in its refit (docs/design-docs/checkpoint-engines.md, 7ea279ab):
    # these 44,544, 58 x (router, its bias, 3 shared-expert, 7 MLA, 2 norm tensors), 3 dense layers
    # x 12 and the embedding, final norm and head
    ("deepseek-v3", 58, 44_544), ("qwen3-30b-a3b", 48, 18_432), ("qwen3-235b-a22b", 94, 36_096),
    ("qwen2.5-7b", 0, 0),
])
def test_expert_tensors_are_counted_over_the_routed_layers_only(name, moe_layers, tensors):
    m = get_model(name)
    assert m.moe_layers == moe_layers and m.expert_tensor_count == tensors
    if name == "deepseek-v3":
        assert tensors + 58 * (2 + 3 + 7 + 2) + 3 * 12 + 3 == 45_395
    from polytrace.stepmodel.parallel import expert_params

    assert expert_params(m) == tensors * m.hidden * m.moe_intermediate


def test_moe_active_parameters_are_a_fraction():
    m = get_model("qwen3-30b-a3b")
    assert 2.5e9 < m.params_active < 4e9  # "A3B": about 3B active per token
    dense = get_model("qwen2.5-7b")
    assert dense.matmul_flops_per_token() == pytest.approx(2 * dense.params_active, rel=1e-9)


def test_names_paths_and_hub_cache_resolve():
    assert get_model("Qwen/Qwen2.5-7B-Instruct").name == "qwen2.5-7b"
    assert get_model("google/gemma-2-2b-it").name == "gemma-2-2b"
    p = "/data/hub/models--Qwen--Qwen2-7B-Instruct/snapshots/f2826a00ceef68f0f2b946d945ecc0477ce4450c"
    assert find_model(p).name == "qwen2-7b"
    assert find_model("sft_model_path/global_step_58") is None


def test_unknown_model_lists_the_nearest_valid_names():
    """Past a screenful of presets the line names the nearest ones and the count, not all of them."""
    with pytest.raises(PolytraceError, match=r"unknown model 'qwen2.5-8b'; nearest valid models: .*qwen2.5-7b") as exc:
        get_model("qwen2.5-8b")
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 200
    assert f"({len(list_models())} in all)" in str(exc.value)


def test_hf_config_file(tmp_path):
    cfg = {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "intermediate_size": 4864,
           "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = get_model(str(path))
    assert m.params_total == get_model("qwen2.5-0.5b").params_total
    assert get_model(str(tmp_path)).head_dim == 64
    moe = from_hf_config({"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
                          "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "num_experts": 128,
                          "num_experts_per_tok": 8, "moe_intermediate_size": 768})
    assert moe.params_total == pytest.approx(get_model("qwen3-30b-a3b").params_total, rel=1e-6)
    (tmp_path / "bad.json").write_text("{\"hidden_size\": 1}")
    with pytest.raises(PolytraceError, match="missing or bad field"):
        get_model(str(tmp_path / "bad.json"))


def test_kv_bytes_per_gpu_stop_shrinking_past_the_kv_heads():
    from polytrace.run.models import get_model

    m = get_model("qwen2.5-7b")  # 28 layers, 4 KV heads of 128
    per_token = 2 * 28 * 4 * 128 * 2
    assert m.kv_bytes_per_token() == per_token
    assert m.kv_bytes_per_token_per_gpu(2) == per_token / 2
    # TP 8 > 4 KV heads: each GPU still holds one head (replicated), not half of one
    assert m.kv_bytes_per_token_per_gpu(8) == m.kv_bytes_per_token_per_gpu(4) == per_token / 4
