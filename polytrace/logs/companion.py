"""Companion files: what a run left beside its console log.

- wandb: ``config.yaml`` (the resolved config, each top-level key as ``{desc, value}``) and
  ``wandb-metadata.json`` (the host's GPU name and count in ``gpu`` / ``gpu_count``, the launch
  overrides in ``args``); a run folder holds them in ``files/`` next to ``output.log``;
- Hydra: ``.hydra/overrides.yaml`` (a list of ``key=value``) and ``.hydra/config.yaml`` (nested);
- a README, markdown page or shell script holding the launch command;
- any JSON or YAML dump of the config.

Every value keeps the file it was read from. A companion file that states another run's model,
batch or cluster than the log (or another companion) is an error naming both values: mixing two
runs would price one and time the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PolytraceError
from . import launch
from .devices import Evidence, scan_lines

# Settings that identify a run: a companion file disagreeing on one belongs to another run.
IDENTITY_KEYS = ("actor_rollout_ref.model.path", "data.train_batch_size", "actor_rollout_ref.rollout.n",
                 "trainer.n_gpus_per_node", "trainer.nnodes")
# A companion file is a config or a script: past this it is something else.
MAX_COMPANION_BYTES = 20_000_000
# wandb run folder layout: the console capture and its companions, first match wins
RUN_LOGS = ("files/output.log", "output.log")
RUN_COMPANIONS = ("files/wandb-metadata.json", "wandb-metadata.json", "files/config.yaml", "config.yaml",
                  ".hydra/overrides.yaml", ".hydra/config.yaml")
# A run's files copied out of their folders keep its name as a prefix: ``<run>.output.log`` beside
# ``<run>.wandb-metadata.json`` and ``<run>.overrides.yaml`` (a wandb run folder flattened), or
# ``<run>_parsed_metrics.csv`` beside ``<run>.README.md`` (a repository's results and its README).
# The log's suffix comes off (longest first) and these are looked for beside it.
LOG_SUFFIXES = (".output.log", "_parsed_metrics.csv", ".log", ".csv", ".txt")
SIBLING_SUFFIXES = (".wandb-metadata.json", ".config.yaml", ".overrides.yaml", ".README.md")


@dataclass
class Companion:
    path: str
    kind: str  # "wandb-metadata", "wandb-config", "hydra-overrides", "config", "script"
    config: dict = field(default_factory=dict)  # flattened key -> value
    devices: list = field(default_factory=list)  # Evidence
    host_gpus: int | None = None  # wandb's gpu_count: GPUs of the host that ran rank 0


def _load_yaml(path: Path, text: str):
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dependency; a broken install lands here
        raise PolytraceError(f"{path}: reading a YAML companion file needs PyYAML (pip install pyyaml)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or "syntax error"
        raise PolytraceError(f"{where}: not readable YAML ({problem})") from None


def _overrides_of(words, path: Path) -> dict:
    out = {}
    for w in words:
        if not isinstance(w, str):
            raise PolytraceError(f"{path}: expected override strings like 'data.train_batch_size=512', got {w!r}")
        for o in launch._word_overrides(w, 0):
            out[o.key] = o.value
    return out


def _unwrap_wandb(doc: dict) -> dict:
    """wandb's ``config.yaml`` stores each top-level key as ``{desc: ..., value: ...}``."""
    out = {}
    for k, v in doc.items():
        if str(k).startswith("_wandb") or k == "wandb_version":
            continue
        out[k] = v["value"] if isinstance(v, dict) and "value" in v else v
    return out


def read_companion(path) -> Companion:
    path = Path(path)
    if path.is_dir():
        raise PolytraceError(f"--config {path}: is a folder; give the file (config.yaml, wandb-metadata.json, "
                             "overrides.yaml, a README or a launch script)")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PolytraceError(f"--config {path}: cannot read ({exc.strerror or exc})") from None
    if size > MAX_COMPANION_BYTES:
        raise PolytraceError(f"--config {path}: {size:,} bytes is not a config or a script")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PolytraceError(f"--config {path}: cannot read ({exc.strerror or exc})") from None
    name = path.name.lower()
    if name.endswith(".json"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise PolytraceError(f"--config {path}: not readable JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise PolytraceError(f"--config {path}: expected a JSON object")
        if "gpu" in doc or "gpu_count" in doc or "args" in doc:
            return _wandb_metadata(path, doc)
        return Companion(str(path), "config", launch.flatten(_unwrap_wandb(doc)))
    if name.endswith((".yaml", ".yml")):
        doc = _load_yaml(path, text)
        if isinstance(doc, list):
            return Companion(str(path), "hydra-overrides", _overrides_of(doc, path))
        if not isinstance(doc, dict):
            raise PolytraceError(f"--config {path}: expected a YAML mapping (a config) or list (Hydra overrides)")
        wandb = any(isinstance(v, dict) and set(v) <= {"desc", "value"} and "value" in v for v in doc.values())
        return Companion(str(path), "wandb-config" if wandb else "config", launch.flatten(_unwrap_wandb(doc)))
    lines = list(enumerate(text.splitlines(), 1))
    found = launch.read_launch(lines)
    comp = Companion(str(path), "script", dict(found.overrides))
    comp.devices = [Evidence(e.kind, e.value, f"{path}:{e.where.split()[-1]}", e.text) for e in scan_lines(lines)]
    if not comp.config and not comp.devices:
        raise PolytraceError(f"--config {path}: holds no launch command with overrides (key=value), no config "
                             "and no device name")
    return comp


def _wandb_metadata(path: Path, doc: dict) -> Companion:
    comp = Companion(str(path), "wandb-metadata")
    args = doc.get("args")
    if isinstance(args, list):
        comp.config = _overrides_of([a for a in args if isinstance(a, str)], path)
    gpu = doc.get("gpu")
    if isinstance(gpu, str) and gpu.strip():
        comp.devices.append(Evidence("device", gpu.strip(), str(path), f"gpu: {gpu.strip()}"))
    count = doc.get("gpu_count")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 100_000:
            raise PolytraceError(f"{path}: gpu_count is {count!r}: expected a whole number")
        comp.host_gpus = count or None
    return comp


def _same_model(a, b) -> bool:
    def key(v):
        s = str(v).strip().rstrip("/").lower()
        return s.split("/")[-1] if "/" in s else s
    return key(a) == key(b)


def _same(key: str, a, b) -> bool:
    if key == "actor_rollout_ref.model.path":
        return _same_model(a, b)
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def attach(log, companions: list[Companion]) -> None:
    """Merge companion files into a log (``TrainingLog``): their settings fill what the log does
    not state (the log's own printed config and launch command win), their device names and host
    GPU count join the log's evidence. A companion of another run is an error."""
    stated = {**log.overrides, **log.printed}
    for comp in companions:
        if comp.path in log.companion_files:
            continue
        for key in IDENTITY_KEYS:
            if key not in comp.config or comp.config[key] is None:
                continue
            mine = comp.config[key]
            if key in stated and stated[key] is not None and not isinstance(stated[key], launch.Unresolved) \
                    and not isinstance(mine, launch.Unresolved) and not _same(key, stated[key], mine):
                raise PolytraceError(f"--config {comp.path}: {key}={mine} but {log.path} has {stated[key]} "
                                     f"({log.source_of(key)}): the file belongs to another run")
            if key in log.companion and not _same(key, log.companion[key], mine):
                raise PolytraceError(f"--config {comp.path}: {key}={mine} but {log.companion_sources[key]} has "
                                     f"{log.companion[key]}: the files belong to different runs")
        for key, value in comp.config.items():
            if key not in log.companion:
                log.companion[key] = value
                log.companion_sources[key] = comp.path
        log.devices.extend(comp.devices)
        if comp.host_gpus and log.host_gpus is None:
            log.host_gpus = (comp.host_gpus, comp.path)
        log.companion_files.append(comp.path)


def siblings(path) -> list[Path]:
    """The companion files named after a log (``LOG_SUFFIXES``, ``SIBLING_SUFFIXES``), in that order."""
    path = Path(path)
    name = path.name
    stem = next((name[: -len(s)] for s in LOG_SUFFIXES if name.endswith(s) and len(name) > len(s)), None)
    if stem is None:
        return []
    return [p for s in SIBLING_SUFFIXES if (p := path.with_name(stem + s)).is_file()]


def run_folder(folder) -> tuple[Path, list[Path]]:
    """A wandb run folder (``wandb/run-*/``): its console capture and its companion files."""
    folder = Path(folder)
    log = next((folder / p for p in RUN_LOGS if (folder / p).is_file()), None)
    if log is None:
        logs = sorted(folder.glob("*.log"))
        if len(logs) != 1:
            raise PolytraceError(f"{folder}: is a folder; expected a verl console log or a wandb CSV file, or a "
                                 "wandb run folder holding files/output.log (or exactly one *.log)")
        log = logs[0]
    companions = [folder / p for p in RUN_COMPANIONS if (folder / p).is_file()]
    return log, companions
