"""Who ran: the model, the reference (or teacher) model and the accelerator of a training log, each
read from what the log and its companion files show, with a note naming where.

The model is the actor's: ``actor_rollout_ref.model.path`` in the printed config, the launch
command or a companion file, never a section the run does not use. verl prints every section
with its defaults, so a GRPO log shows a critic path (``~/models/deepseek-llm-7b-chat``) although
no critic runs; it is read only when a critic runs and the actor's path is nowhere. A reference
model of its own (``actor_rollout_ref.ref.model.path``: on-policy distillation's teacher) is priced
as that model.

The accelerator is set, or checked against ``--gpu``, by the log's own evidence
(``polytrace.logs.devices``): a device name with a preset is used, one without is an error naming
the nearest presets, and a platform without a name (Ascend's ``vllm_ascend``, ROCm) asks for
``--gpu`` among that platform's presets. Only when the log shows nothing is an A100 assumed, with
a note.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from ..errors import PolytraceError
from ..logs import TrainingLog, Unresolved
from ..logs.devices import GFX_ARCH
from ..run.hardware import GPU, GPUS, detect, get_gpu, nearest_presets
from ..run.models import (
    ModelSpec,
    find_model,
    from_hf_config,
    get_model,
    hf_cached_config,
    list_models,
    read_config_file,
)

DEFAULT_GPU = "a100-80g"
ACTOR_KEY = "actor_rollout_ref.model.path"
REF_KEY = "actor_rollout_ref.ref.model.path"
CRITIC_KEY = "critic.model.path"

# --- model names -----------------------------------------------------------------------------------

_FAMILY = re.compile(r"(qwen)-?(\d(?:\.\d)?)|(llama)-?(\d)|(gemma)-?(\d)|(deepseek)-(llm)|(mistral)|(mixtral)"
                     r"|(ministral)|(gpt)-(oss)")
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)b\b")


def _family_and_size(text: str) -> tuple[str, str] | None:
    s = text.lower().replace("_", "-")
    # DeepSeek-R1 distills keep their base's architecture (Qwen2.5 or Llama 3.1)
    s = re.sub(r"deepseek-r1-distill-qwen", "qwen2.5", s)
    s = re.sub(r"deepseek-r1-distill-llama", "llama-3.1", s)
    s = s.replace("meta-llama-3", "llama-3")
    fam = _FAMILY.search(s)
    size = _SIZE.search(s[fam.end():] if fam else s)
    if not fam or not size:
        return None
    name = "".join(g for g in fam.groups() if g)  # qwen2.5, llama3, gemma2, deepseekllm, mistral
    return name, size.group(1)


def guess_model(text: str) -> ModelSpec | None:
    """The preset of the same architecture family and size as a model name or path the presets
    do not list by name (``Qwen2.5-7B-SFT`` -> qwen2.5-7b, ``Meta-Llama-3-8B-Instruct`` ->
    llama-3.1-8b); None unless exactly one matches."""
    parts = [p for p in re.split(r"[/\\]", str(text)) if p]
    m = re.search(r"models--([^/]+)--([^/]+)", str(text))
    if m:
        parts.append(m.group(2))
    for part in reversed(parts):
        want = _family_and_size(part)
        if want is None:
            continue
        matches = [name for name in list_models()
                   if (_family_and_size(name) or (None, None)) == want and "vl" not in name
                   and "math" not in name and "distill" not in name]
        if len(matches) == 1:
            return find_model(matches[0])
    return None


def model_family(spec: ModelSpec) -> str:
    """Architecture family of a model (``qwen2`` for Qwen2 and Qwen2.5, ``qwen3-moe``, ``llama3``),
    the unit a calibration transfers within."""
    fs = _family_and_size(spec.name) or _family_and_size(spec.source or "")
    base = fs[0] if fs else spec.name.lower()
    if base.startswith("qwen2"):  # Qwen2 and Qwen2.5 share one architecture
        base = "qwen2"
    return base + ("-moe" if spec.experts else "")


def model_from_text(text: str, where: str, notes: list[str]) -> ModelSpec | None:
    """A model named by a path or HF id: a preset, the ``config.json`` of a local folder or of the
    local HF cache, else the preset of the same family and size (with a note)."""
    spec = find_model(text)
    if spec is not None:
        return spec
    p = Path(text).expanduser()
    try:
        local = p / "config.json" if p.is_dir() else None
    except OSError:
        local = None
    cached = local if local is not None and local.is_file() else hf_cached_config(text)
    if cached is not None:
        notes.append(f"model: {text} ({where}) read from {cached}")
        return read_config_file(cached)
    spec = guess_model(text)
    if spec is not None:
        notes.append(f"model: {text} ({where}) read as the preset {spec.name} (same architecture family and "
                     "size; pass --model to choose another)")
    return spec


def critic_runs(log: TrainingLog) -> bool:
    """A critic runs when the steps time its passes (verl times ``values`` and ``update_critic``
    whenever it has one); the printed ``critic`` section alone says nothing."""
    stages = set(log.stages())
    return "values" in stages or "update_critic" in stages


def _actor_paths(log: TrainingLog) -> list[tuple[object, str]]:
    """The actor's model path wherever it is stated, most authoritative first: the printed
    config, the launch commands (last first), companion files; then the reward model's
    ``input_tokenizer``, which verl sets to the actor's path."""
    out = []
    if log.printed.get(ACTOR_KEY) is not None:
        out.append((log.printed[ACTOR_KEY], f"{ACTOR_KEY} in the printed config"))
    if log.overrides.get(ACTOR_KEY) is not None:
        out.append((log.overrides[ACTOR_KEY], f"{ACTOR_KEY} in {log.source_of(ACTOR_KEY)}"))
    for cand in reversed(log.model_candidates):
        if all(str(cand) != str(c) for c, _ in out):
            out.append((cand, "an earlier launch command"))
    if log.companion.get(ACTOR_KEY) is not None:
        out.append((log.companion[ACTOR_KEY], f"{ACTOR_KEY} in {log.companion_sources[ACTOR_KEY]}"))
    tok = log.printed.get("reward_model.model.input_tokenizer")
    if isinstance(tok, str):
        out.append((tok, "reward_model.model.input_tokenizer in the printed config (the actor's path)"))
    return out


def _hf_spec(log: TrainingLog, fallback_name: str = "") -> ModelSpec | None:
    hf = log.hf_config
    if not isinstance(hf, dict):
        return None
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else hf
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        v = text.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 10_000_000:
            return None
    name = hf.get("_name_or_path")
    name = name if isinstance(name, str) and name else fallback_name
    return from_hf_config(hf, name=name.rstrip("/").split("/")[-1] if name else "from log")


def _from_literal_folder(path: Unresolved, notes: list[str]) -> ModelSpec | None:
    """``$HOME/models/Qwen2.5-0.5B-Instruct``: the variable hides where the weights live, not
    which model they are when the last folder is written out; that folder name is read against
    the presets (a name only: no file is looked up), said in a note."""
    last = str(path.text).rstrip("/").split("/")[-1]
    if not last or "$" in last:
        return None
    spec = find_model(last) or guess_model(last)
    if spec is not None:
        notes.append(f"model: {spec.name} from the folder name {last!r} of the actor's path {path.text!r} "
                     f"({path.explain()}, so no config.json there could be read; pass --model to choose "
                     "another)")
    return spec


def resolve_model(log: TrainingLog, given: str | None, notes: list[str]) -> ModelSpec:
    """The actor's model (see the module's doc), with a note naming where it was read. ``--model``
    wins over the log, but not past what the log states: a model of over twice or under half the
    parameters of the one its model path names cannot be the run's (a 70B priced on a 0.5B run's
    timings gave -4000% accuracy, unsaid)."""
    if given:
        spec = get_model(given)
        stated = _stated_model(log)
        if stated is not None and stated[0].name != spec.name:
            ratio = spec.params_total / max(stated[0].params_total, 1)
            if not 0.5 <= ratio <= 2.0:
                raise PolytraceError(f"--model {given}: {log.path} states {stated[0].name} ({stated[1]}); "
                                     f"{spec.name} has {ratio:.3g}x its parameters, so it is not this run's model")
            notes.append(f"model: {spec.name} (--model), where the log states {stated[0].name} ({stated[1]})")
        return spec
    unresolved, unknown = [], []
    for cand, where in _actor_paths(log):
        if isinstance(cand, Unresolved):
            unresolved.append(cand)
            continue
        text = str(cand)
        before = len(notes)
        spec = model_from_text(text, where, notes)
        if spec is not None:
            if len(notes) == before:  # (a cache or family match has said where already)
                notes.append(f"model: {spec.name} from {where} ({text})")
            return spec
        unknown.append((text, where))
    spec = _hf_spec(log, unknown[0][0] if unknown else "")
    if spec is not None:
        notes.append(f"model: {spec.name} read from the model config printed in the log"
                     + (" (language model only: a vision tower is not counted)"
                        if isinstance(log.hf_config.get("text_config"), dict) else ""))
        return spec
    for u in unresolved:
        spec = _from_literal_folder(u, notes)
        if spec is not None:
            return spec
    if unknown:
        text, where = unknown[0]
        raise PolytraceError(f"{log.path}: the actor's model {text!r} ({where}) has no preset, no config.json "
                             "there and none in the local HF cache; pass --model NAME or --model "
                             "path/to/config.json")
    if unresolved:
        u = unresolved[0]
        raise PolytraceError(f"{log.path}: the model path is {u.text!r}: {u.explain()}; pass --model NAME "
                             "or --model path/to/config.json")
    cpath = log.config.get(CRITIC_KEY)
    if critic_runs(log) and isinstance(cpath, str):
        spec = model_from_text(cpath, f"{CRITIC_KEY}", notes)
        if spec is not None:
            notes.append(f"model: {spec.name} from the critic's path {cpath} ({log.source_of(CRITIC_KEY)}): the log "
                         "names no actor model; pass --model if the actor differs")
            return spec
    named = ", ".join(sorted({str(c) for c in log.model_candidates})) or "none"
    raise PolytraceError(f"{log.path}: cannot tell the model from the log (model paths: {named}); "
                         "pass --model NAME or --model path/to/config.json")


def _stated_model(log: TrainingLog) -> tuple[ModelSpec, str] | None:
    """(the model, where) the log's actor path names, when it names a known one; else None."""
    for cand, where in _actor_paths(log):
        if isinstance(cand, Unresolved):
            continue
        try:
            spec = model_from_text(str(cand), where, [])
        except PolytraceError:
            continue
        if spec is not None:
            return spec, where
    return None


def resolve_ref_model(log: TrainingLog, actor: ModelSpec, notes: list[str]) -> ModelSpec | None:
    """A reference model of its own (a distillation teacher), or None when the reference is the
    actor's initial weights (verl's default)."""
    path = log.config.get(REF_KEY)
    if path is None or isinstance(path, Unresolved):
        return None
    where = f"{REF_KEY} in {log.source_of(REF_KEY)}"
    spec = model_from_text(str(path), where, notes)
    if spec is None:
        notes.append(f"reference model {path} is no known preset (no config.json here or in the local HF cache; "
                     f"{where}): its pass priced as the actor's (pass --set {REF_KEY}=PRESET)")
        return None
    if spec.name != actor.name:
        notes.append(f"reference model: {spec.name} from {where}, priced as its own model (actor {actor.name})")
        return spec
    return None


def resolve_critic_model(log: TrainingLog, notes: list[str]) -> ModelSpec | None:
    if not critic_runs(log):
        return None
    cpath = log.config.get(CRITIC_KEY)
    if not isinstance(cpath, str):
        return None
    return find_model(cpath) or model_from_text(cpath, f"{CRITIC_KEY} in {log.source_of(CRITIC_KEY)}", notes)


# --- the accelerator -------------------------------------------------------------------------------


def platform_of(gpu: GPU) -> str:
    if gpu.slug.startswith("ascend"):
        return "npu"
    if gpu.slug.startswith("mi"):
        return "rocm"
    return "cuda"


def _platform_presets(platform: str) -> list[str]:
    return [slug for slug, g in GPUS.items() if platform_of(g) == platform]


def _config_platform(log: TrainingLog):
    dev = log.config.get("trainer.device")
    if isinstance(dev, str) and dev.strip().lower() in ("npu", "cuda"):
        return dev.strip().lower(), f"trainer.device in {log.source_of('trainer.device')}"
    return None


def resolve_gpu(log: TrainingLog, given: str | None, notes: list[str]) -> GPU:
    """The accelerator: ``--gpu`` checked against the log's evidence, else the evidence, else an
    assumed A100 (noted)."""
    names = [e for e in log.devices if e.kind == "device"]
    platforms = [e for e in log.devices if e.kind == "platform"]
    cfg_platform = _config_platform(log)
    named = []
    for e in names:
        preset = detect(e.value)
        if preset is None and given is None:
            raise PolytraceError(f"{log.path}: accelerator {e.value!r} ({e.say()}) has no preset; nearest presets: "
                                 f"{', '.join(nearest_presets(e.value))}; pass --gpu NAME")
        named.append((e, preset))
    if given:
        gpu = get_gpu(given)
        for e, preset in named:
            if preset is not None and preset.slug != gpu.slug:
                raise PolytraceError(f"--gpu {given}: the log shows {e.value!r} ({e.say()}), preset {preset.slug}; "
                                     "drop --gpu or give the log's accelerator")
        plat = platform_of(gpu)
        for e in platforms:
            if e.value in ("npu", "rocm") and e.value != plat:
                raise PolytraceError(f"--gpu {given}: the log shows {_PLATFORM_WORDS[e.value]} ({e.say()}); presets: "
                                     f"{', '.join(_platform_presets(e.value))}")
        if cfg_platform and cfg_platform[0] == "npu" and plat != "npu":
            raise PolytraceError(f"--gpu {given}: the log's {cfg_platform[1]} says npu (Ascend); presets: "
                                 f"{', '.join(_platform_presets('npu'))}")
        return gpu
    distinct = {p.slug: e for e, p in named}
    if len(distinct) > 1:
        shown = "; ".join(f"{e.value!r} ({e.say()})" for e in distinct.values())
        raise PolytraceError(f"{log.path}: the log shows more than one accelerator: {shown}; pass --gpu NAME")
    if distinct:
        slug, e = next(iter(distinct.items()))
        notes.append(f"GPU: {slug} from {e.value!r} ({e.say()})")
        return GPUS[slug]
    plats = {e.value: e for e in platforms}
    if cfg_platform and cfg_platform[0] == "npu" and "npu" not in plats:
        plats["npu"] = None
    for plat in ("npu", "rocm"):
        if plat not in plats:
            continue
        e = plats[plat]
        said = e.say() if e is not None else cfg_platform[1]
        options = _platform_presets(plat)
        arch = [x for x in log.devices if x.kind == "arch"]
        if plat == "rocm" and arch:
            chips = GFX_ARCH.get(arch[0].value, ())
            if len(chips) == 1:
                notes.append(f"GPU: {chips[0]} from the ROCm architecture {arch[0].value} ({arch[0].say()})")
                return GPUS[chips[0]]
            options = list(chips) or options
        raise PolytraceError(f"{log.path}: the log shows {_PLATFORM_WORDS[plat]} ({said}) but not which; pass --gpu "
                             f"{' or --gpu '.join(options)}")
    gpu = get_gpu(DEFAULT_GPU)
    notes.append(f"GPU not stated in the log: assumed {gpu.slug} (pass --gpu); calibration absorbs most of the "
                 "difference")
    return gpu


_PLATFORM_WORDS = {"npu": "Ascend NPUs", "rocm": "AMD GPUs (ROCm)", "cuda": "NVIDIA GPUs (CUDA)"}


def host_gpu_count(log: TrainingLog, nodes: int | None, notes: list[str]) -> int | None:
    """GPUs from wandb-metadata.json's ``gpu_count`` (the host of rank 0) times the nodes, when
    the log states no ``trainer.n_gpus_per_node``."""
    if not log.host_gpus:
        return None
    count, where = log.host_gpus
    total = count * (nodes or 1)
    notes.append(f"GPUs per node: {count} from gpu_count in {where}" + (f" x {nodes} nodes" if nodes else "")
                 + " (the host's GPUs; pass --gpus if the run used fewer)")
    return total


# --- a companion file of another run ---------------------------------------------------------------

BATCH_KEYS = ("data.train_batch_size", "actor_rollout_ref.rollout.n")
# Sequences a step, from the metrics, may differ from prompts x n by rounding of the logged means
# (3 decimals) and, on padded logs, by a few tokens a sequence: past 15% it is another batch.
_BATCH_TOLERANCE = 0.15
_BATCH_STEPS = 20


def _sequences_per_step(log: TrainingLog, n_gpus: int) -> tuple[float, str] | None:
    """Sequences a step as the metrics count them: tokens a step over the mean sequence length,
    the tokens from ``perf/total_num_tokens`` or ``global_seqlen/mean`` x GPUs (tokens per
    data-parallel rank); the median over the first steps."""
    seen, how = [], ""
    for s in log.steps[:_BATCH_STEPS * 2]:
        m = s.metrics
        pm, rm = m.get("prompt_length/mean"), m.get("response_length/mean")
        if not all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in (pm, rm)):
            continue
        total = m.get("perf/total_num_tokens")
        if isinstance(total, float) and math.isfinite(total) and total > 0:
            seen.append(total / (pm + rm))
            how = "perf/total_num_tokens / (prompt + response mean length)"
        elif isinstance(m.get("global_seqlen/mean"), float) and math.isfinite(m["global_seqlen/mean"]):
            seen.append(m["global_seqlen/mean"] * n_gpus / (pm + rm))
            how = f"global_seqlen/mean x {n_gpus} GPUs / (prompt + response mean length)"
        if len(seen) >= _BATCH_STEPS:
            break
    if len(seen) < 3:
        return None
    return statistics.median(seen), how


def check_companion_batch(log: TrainingLog, prompts: int, n: int, n_gpus: int, ov) -> None:
    """A batch read only from a companion file must be the batch the log's metrics hold: a
    launch script or README of another run states another batch (the log itself cannot say)."""
    if getattr(ov, "prompts", None) or getattr(ov, "n", None):
        return
    from_files = [k for k in BATCH_KEYS if k in log.companion_sources and k not in log.printed
                  and k not in log.overrides]
    if not from_files:
        return
    found = _sequences_per_step(log, n_gpus)
    if found is None:
        return
    seen, how = found
    stated = prompts * n
    if abs(seen - stated) > _BATCH_TOLERANCE * stated:
        where = log.companion_sources[from_files[0]]
        raise PolytraceError(f"--config {where}: states {prompts} prompts x {n} responses = {stated} sequences a "
                             f"step, but the metrics of {log.path} hold about {seen:.0f} ({how}): the file belongs "
                             "to another run")
