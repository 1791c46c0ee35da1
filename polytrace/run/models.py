"""Model architecture presets and a Hugging Face ``config.json`` reader.

The figures live in ``polytrace/data/models.json``, each row naming the Hub repository its
``config.json`` was read from. ``ModelSpec`` turns them into what the composition layer needs:
parameter counts (total and active per token for MoE), matmul FLOPs per token, attention FLOPs per
pair of tokens, and KV-cache bytes per token.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import PolytraceError, unknown_name


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    intermediate: int  # dense MLP width (for MoE: the width of one expert is ``moe_intermediate``)
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool = False
    qkv_bias: bool = False
    experts: int = 0  # routed experts per MoE layer (0 = dense)
    active_experts: int = 0  # experts each token is routed to
    moe_intermediate: int = 0
    shared_experts: int = 0
    # leading layers with a dense MLP of width ``intermediate`` (DeepSeek's first_k_dense_replace)
    dense_layers: int = 0
    # Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass through low-rank
    # latents; ``head_dim`` is the query/key width (nope + rope), ``v_head_dim`` the value width.
    # The KV cache holds the latent and the rope key: ``kv_lora_rank + rope_head_dim`` per layer.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0  # 0: ordinary (grouped-query) attention
    rope_head_dim: int = 0
    v_head_dim: int = 0
    source: str = ""
    aliases: tuple[str, ...] = field(default=(), compare=False)
    # How an inference engine stores and multiplies the linear layers: "bf16", or "fp8" (vLLM's
    # ``quantization="fp8"``: each linear layer's weights one byte, the embedding and LM head kept
    # 16-bit). The trainer's copy is always bf16; ``RunConfig.engine_model`` sets this for the rollout.
    weight_dtype: str = "bf16"

    # --- parameter counts -------------------------------------------------------------------
    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def attn_params_per_layer(self) -> int:
        if self.kv_lora_rank:
            h, n = self.hidden, self.heads
            q = (h * self.q_lora_rank + self.q_lora_rank * n * self.head_dim if self.q_lora_rank
                 else h * n * self.head_dim)
            nope = self.head_dim - self.rope_head_dim
            kv = h * (self.kv_lora_rank + self.rope_head_dim) + self.kv_lora_rank * n * (nope + self.value_dim)
            return q + kv + n * self.value_dim * h
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + o + bias

    def mlp_params_per_layer(self, active: bool) -> int:
        """Gated MLP (gate, up, down = 3 matrices). For MoE: the routed experts a token uses (or
        all of them), shared experts and the router."""
        if not self.experts:
            return 3 * self.hidden * self.intermediate
        per_expert = 3 * self.hidden * self.moe_intermediate
        n = self.active_experts if active else self.experts
        return (n + self.shared_experts) * per_expert + self.hidden * self.experts

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def _body_params(self, active: bool) -> int:
        dense = min(self.dense_layers, self.layers) if self.experts else 0
        mlp = dense * 3 * self.hidden * self.intermediate + (self.layers - dense) * self.mlp_params_per_layer(active)
        return self.layers * self.attn_params_per_layer + mlp

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts (DeepSeek-V3: 58 of 61, its first three dense)."""
        return self.layers - min(self.dense_layers, self.layers) if self.experts else 0

    @property
    def expert_tensor_count(self) -> int:
        """The routed experts' tensors in the Hugging Face checkpoint: gate, up and down of every
        expert of every MoE layer, each stored apart (Qwen3-30B-A3B: 18,432; DeepSeek-V3: 44,544
        of the 45,395 tensors NeMo RL counts per vLLM rank in a refit,
        ``docs/design-docs/checkpoint-engines.md`` at NVIDIA-NeMo/RL 7ea279ab). A refit hands
        them to the engine one by one, whatever their size (``stepmodel/refit.py``)."""
        return 3 * self.experts * self.moe_layers

    @property
    def params_total(self) -> int:
        body = self._body_params(False)
        head = 0 if self.tied_embeddings else self.lm_head_params
        return body + self.embedding_params + head

    @property
    def params_active(self) -> int:
        """Parameters one token touches (embedding lookup excluded: it is a gather, not a matmul)."""
        return self._body_params(True) + self.lm_head_params

    # --- costs ------------------------------------------------------------------------------
    def matmul_flops_per_token(self, lm_head: bool = True) -> float:
        """Forward FLOPs of the weight matmuls for one token (2 per multiply-add). The lm head is
        counted unless ``lm_head=False`` (a critic's value head is one column)."""
        body = self._body_params(True)
        return 2.0 * (body + (self.lm_head_params if lm_head else self.hidden))

    @property
    def attn_flops_per_pair(self) -> float:
        """Forward FLOPs of attention scores and values per (query, key) pair, all layers:
        QK^T and PV, 2 FLOPs per multiply-add each (query/key and value widths differ under MLA)."""
        return 2.0 * self.layers * self.heads * (self.head_dim + self.value_dim)

    @property
    def linear_bytes_per_param(self) -> float:
        """Bytes of one weight of a linear layer as stored: 1 under FP8, else 2."""
        return 1.0 if self.weight_dtype == "fp8" else 2.0

    def weight_bytes(self, dtype_bytes: int | None = None, active: bool = False) -> float:
        """Bytes of the weights (``active``: those one token touches, with the embedding table).
        ``dtype_bytes`` prices every parameter at that width; by default the linear layers take
        ``linear_bytes_per_param`` and the embedding and LM head 2 bytes (an FP8 engine keeps
        them 16-bit)."""
        n = self.params_active + self.embedding_params if active else self.params_total
        if dtype_bytes is not None:
            return float(n) * dtype_bytes
        tables = self.embedding_params + (0 if self.tied_embeddings else self.lm_head_params)
        return float(n - tables) * self.linear_bytes_per_param + 2.0 * tables

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> float:
        if self.kv_lora_rank:  # MLA caches one latent and one rope key per layer, not K and V per head
            return float(self.layers * (self.kv_lora_rank + self.rope_head_dim) * dtype_bytes)
        return 2.0 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def kv_bytes_per_token_per_gpu(self, tp: int, dtype_bytes: int = 2) -> float:
        """K and V bytes per cached token on one GPU of a ``tp``-way tensor-parallel engine. Past
        ``tp = kv_heads`` every GPU still holds one KV head (vLLM replicates them), so the
        per-GPU share stops shrinking there (Qwen2.5-7B, 4 KV heads, at TP 8: 1 head, not 0.5)."""
        if self.kv_lora_rank:  # the latent is not split by heads: every rank holds all of it
            return self.kv_bytes_per_token(dtype_bytes)
        heads_per_gpu = max(self.kv_heads / max(1, tp), 1.0)
        return 2.0 * self.layers * heads_per_gpu * self.head_dim * dtype_bytes

    def to_dict(self) -> dict:
        return {
            "name": self.name, "source": self.source, "layers": self.layers, "hidden": self.hidden,
            "intermediate": self.intermediate, "heads": self.heads, "kv_heads": self.kv_heads,
            "head_dim": self.head_dim, "vocab": self.vocab, "tied_embeddings": self.tied_embeddings,
            "experts": self.experts, "active_experts": self.active_experts,
            "moe_intermediate": self.moe_intermediate, "shared_experts": self.shared_experts,
            "dense_layers": self.dense_layers, "kv_lora_rank": self.kv_lora_rank, "params_total": self.params_total,
            "params_active": self.params_active,
        }


@functools.cache
def _presets() -> dict[str, ModelSpec]:
    text = resources.files("polytrace").joinpath("data/models.json").read_text()
    out = {}
    for row in json.loads(text)["models"]:
        row = dict(row)
        row["aliases"] = tuple(row.get("aliases", ()))
        spec = ModelSpec(**row)
        out[spec.name] = spec
    return out


def list_models() -> list[str]:
    return sorted(_presets())


def _norm(name: str) -> str:
    s = name.strip().lower().rstrip("/")
    s = s.split("/")[-1] if "/" in s else s
    for suffix in ("-instruct", "-chat", "-base", "-it"):
        if s.endswith(suffix):
            s = s[: -len(suffix)]
    return s


@functools.cache
def _index() -> dict[str, str]:
    idx = {}
    for spec in _presets().values():
        idx[_norm(spec.name)] = spec.name
        idx[_norm(spec.source.split(" ")[0])] = spec.name
        for a in spec.aliases:
            idx[_norm(a)] = spec.name
    return idx


def find_model(text: str) -> ModelSpec | None:
    """The preset a model name, HF repo id or local path names, or None. Paths of the Hub cache
    (``.../models--Qwen--Qwen2-7B-Instruct/snapshots/...``) are understood."""
    if not text:
        return None
    m = re.search(r"models--([^/]+)--([^/]+)", text)
    candidates = [f"{m.group(1)}/{m.group(2)}"] if m else []
    candidates.append(text)
    candidates += [part for part in re.split(r"[/\\]", text) if part]
    idx = _index()
    for c in candidates:
        key = _norm(c)
        if key in idx:
            return _presets()[idx[key]]
    return None


def _int_field(cfg: dict, key: str, where: str, *, required: bool = False, default: int = 0) -> int:
    """One integer field of a HF config: a whole number, positive where required (a zero layer or
    head count divides by zero further on) and never negative; else a one-line error naming it."""
    value = cfg.get(key)
    if value is None or (not required and value == 0):
        if required:
            raise PolytraceError(f"model config {where}: missing or bad field {key}: absent")
        return default
    ok = not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and value.is_integer())
    if not ok or value < (1 if required else 0):
        kind = "a positive integer" if required else "a whole number >= 0"
        raise PolytraceError(f"model config {where}: missing or bad field {key} = {repr(value)[:40]}: not {kind}")
    return int(value)


def from_hf_config(cfg: dict, name: str = "") -> ModelSpec:
    """A ``ModelSpec`` from the fields of a HF ``config.json`` (dense and MoE decoders)."""
    text_cfg = cfg.get("text_config") or cfg.get("llm_config") or cfg
    where = name or "config.json"
    if not isinstance(text_cfg, dict):
        raise PolytraceError(f"model config {where}: text_config is not a JSON object")

    def field(key, required=False, default=0):
        return _int_field(text_cfg, key, where, required=required, default=default)

    hidden, layers = field("hidden_size", True), field("num_hidden_layers", True)
    heads, vocab = field("num_attention_heads", True), field("vocab_size", True)
    kv = field("num_key_value_heads", default=heads)
    head_dim = field("head_dim", default=hidden // heads)
    if not head_dim:
        raise PolytraceError(f"model config {where}: hidden_size {hidden} over {heads} heads leaves no head_dim")
    experts = field("num_experts") or field("n_routed_experts") or field("num_local_experts")
    active = field("num_experts_per_tok") if experts else 0
    moe_inter = field("moe_intermediate_size") if experts else 0
    if experts and not moe_inter:
        moe_inter = field("intermediate_size")
    model_type = str(text_cfg.get("model_type", ""))
    kv_lora = field("kv_lora_rank")
    mla = {}
    if kv_lora:
        nope, rope = field("qk_nope_head_dim"), field("qk_rope_head_dim")
        head_dim = nope + rope or head_dim
        mla = dict(q_lora_rank=field("q_lora_rank"), kv_lora_rank=kv_lora, rope_head_dim=rope,
                   v_head_dim=field("v_head_dim", default=head_dim))
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or model_type or "custom"),
        layers=layers, hidden=hidden, intermediate=field("intermediate_size", default=4 * hidden),
        heads=heads, kv_heads=kv, head_dim=head_dim, vocab=vocab,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", text_cfg.get("tie_word_embeddings", False))),
        qkv_bias=model_type.startswith("qwen2"),
        experts=experts, active_experts=active, moe_intermediate=moe_inter,
        shared_experts=field("n_shared_experts"),
        dense_layers=field("first_k_dense_replace") if experts else 0, **mla,
        source=f"config.json ({name})" if name else "config.json",
    )


def hf_cache_dirs() -> list[Path]:
    """Where a Hugging Face hub cache may be: ``$HF_HUB_CACHE``, ``$HF_HOME/hub``, then
    ``~/.cache/huggingface/hub`` (the order ``huggingface_hub`` resolves them)."""
    import os

    out = []
    if os.environ.get("HF_HUB_CACHE"):
        out.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        out.append(Path(os.environ["HF_HOME"]) / "hub")
    out.append(Path("~/.cache/huggingface/hub").expanduser())
    return out


_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,95}$")


def hf_cached_config(repo_id: str) -> Path | None:
    """The ``config.json`` of a Hub repo id (``Qwen/Qwen3-32B``) in a local hub cache
    (``models--Qwen--Qwen3-32B/snapshots/<rev>/config.json``), newest snapshot first; None if absent."""
    text = str(repo_id).strip().rstrip("/")
    m = re.search(r"models--([^/]+)--([^/]+)", text)
    if m:
        text = f"{m.group(1)}/{m.group(2)}"
    if not _REPO_ID.match(text):
        return None
    org, name = text.split("/")
    for root in hf_cache_dirs():
        snaps = root / f"models--{org}--{name}" / "snapshots"
        try:
            found = sorted(snaps.glob("*/config.json"), key=lambda q: q.stat().st_mtime, reverse=True)
        except OSError:
            continue
        if found:
            return found[0]
    return None


def read_config_file(p: Path) -> ModelSpec:
    try:
        cfg = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise PolytraceError(f"{p}: not a readable JSON model config ({exc})") from None
    if not isinstance(cfg, dict):
        raise PolytraceError(f"{p}: not a JSON object")
    return from_hf_config(cfg, name=str(p))


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name, alias or HF repo id, a HF ``config.json`` (file or folder holding one),
    or a Hub repo id whose ``config.json`` is in a local hub cache."""
    if not str(name_or_path).strip():  # Path("") is ".", whose "folder holds no config.json" named no flag
        raise PolytraceError(f"--model {name_or_path!r}: empty; give a preset (polytrace presets models), "
                             "a Hugging Face repo id or a config.json")
    p = Path(name_or_path).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        p = p / "config.json"
    if p.is_file():
        return read_config_file(p)
    spec = find_model(name_or_path)
    if spec is None:
        cached = hf_cached_config(name_or_path)
        if cached is not None:
            return read_config_file(cached)
        if p.is_dir():
            raise PolytraceError(f"--model {p}: folder holds no config.json")
        if p.suffix.lower() == ".json":
            raise PolytraceError(f"--model {p}: no such model config file")
        raise unknown_name("model", name_or_path, list_models())
    return spec
