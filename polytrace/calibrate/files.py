"""Calibration files: calibrate once (on a log, or on the stage averages a dashboard shows), then
ask ``polytrace estimate --calibration cal.json`` about any other configuration of that model
family.

A file holds the named scalars, the configuration they were fitted for, the execution mode, and
where they came from::

    {"format": "polytrace.calibration", "version": 1,
     "scalars": {"rollout_slowdown": 2.1, ..., "gen_overhead_s": 0.8, ..., "other_overhead_s": 1.2},
     "model": {"name": "qwen2.5-7b", "family": "qwen2", ...}, "gpu": "mi300x", "mode": "sync",
     "config": {...}, "stages": [...], "fit_error_pct": {...}, "deviation": {...}, "split": {...},
     "source": {"kind": "log" | "stage-times", ...}, "created_by": {"polytrace": ..., "commit": ...}}

Scalars are ``<kind>_slowdown`` (a kind of work: ``compose.stages.GROUPS``; with
``<kind>_<family>_slowdown`` for the kernel families the shared priors price apart,
``compose.efficiency.SEPARATE_FAMILIES``) and
``<stage>_overhead_s`` (a stage's fixed seconds, ``other`` for the step outside the stages); a
later mode may add its own under the same two patterns. Every stage has a fixed cost in the file:
one the calibration did not time takes the like stage's (``calibration.FIXED_FALLBACK``) and the
file says so under ``source.derived``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np

from ..atomic_write import atomic_write_text
from ..errors import PolytraceError
from ..provenance import file_sha256
from ..run.models import ModelSpec
from ..stepmodel.stages import GROUPS, STAGES, stage_costs
from .fit import (
    FIXED_FALLBACK,
    Calibration,
    FitOptions,
    StepData,
    by_family,
    calibrate,
    fit,
    prior_for,
    roofline_bounds,
)
from .logconfig import Overrides, model_family

FORMAT = "polytrace.calibration"
VERSION = 1
_SCALAR = re.compile(r"^[a-z][a-z0-9_]{0,63}_(slowdown|overhead_s)$")
# a slowdown is real seconds per modelled second: past 1000x the model or the file is wrong
_MAX_SLOWDOWN = 1000.0
_MAX_OVERHEAD_S = 1e6
_MAX_FILE_BYTES = 10_000_000
STAGE_TIMES_STEPS = 4  # sampled profile steps the averages are compared with


def _derived(cal: Calibration) -> tuple[dict, dict]:
    scalars = cal.scalars()
    derived = {}
    for s in STAGES:
        key = f"{s}_overhead_s"
        if key not in scalars:
            scalars[key] = cal.stage_overhead(s)
            like = next((o for o in FIXED_FALLBACK.get(s, ()) if o in cal.overhead_s), None)
            derived[key] = f"copied from {like}_overhead_s" if like and scalars[key] else "none timed: 0"
    for g in GROUPS:
        key = f"{g}_slowdown"
        if key not in scalars:
            derived[key] = "not calibrated: the model's own efficiency (1.0)"
    return scalars, derived


def document(cal: Calibration, run, stages: list[str], mode: str, source: dict, notes: list[str]) -> dict:
    from .. import __version__
    from ..provenance import git_commit

    scalars, derived = _derived(cal)
    source = dict(source, derived=derived, left_out=[lo.to_dict() for lo in cal.left_out],
                  calibration_steps=cal.steps)
    model = run.model
    return {
        "format": FORMAT, "version": VERSION,
        "scalars": {k: float(v) for k, v in scalars.items()},
        "model": {"name": model.name, "family": model_family(model), "params_total": model.params_total,
                  "layers": model.layers, "hidden": model.hidden},
        "gpu": run.gpu.slug, "mode": mode, "overlapped": list(cal.overlapped), "config": run.to_dict(),
        "stages": list(stages),
        "fit_error_pct": {k: float(v) for k, v in cal.fit_error_pct.items()},
        "split": cal.split, "deviation": cal.deviation,
        "source": source, "notes": list(notes),
        "created_by": {"polytrace": __version__, "commit": git_commit()},
    }


@dataclasses.dataclass
class CalibrationResult:
    """``polytrace calibrate``: the calibration file's document as fields (``to_json()`` is the
    file written and the ``--json`` output, keys in this order; ``from_json`` reads one back), with
    the objects it was made from beside it (``calibration``, the ``run`` priced and the ``log``
    read; ``None`` when read back from a document, never in it)."""

    format: str
    version: int
    scalars: dict
    model: dict
    gpu: str
    mode: str
    overlapped: list
    config: dict
    stages: list
    fit_error_pct: dict
    split: dict
    deviation: dict
    source: dict
    notes: list
    created_by: dict
    calibration: Calibration | None = dataclasses.field(default=None, repr=False, compare=False)
    run: object = dataclasses.field(default=None, repr=False, compare=False)
    log: object = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict, **objects) -> CalibrationResult:
        return cls(**{f.name: doc[f.name] for f in _doc_fields(cls)}, **objects)

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in _doc_fields(type(self))}

    @property
    def model_name(self) -> str:
        return self.model["name"]

    @property
    def model_family(self) -> str:
        return self.model["family"]

    @property
    def left_out(self) -> list[dict]:
        return self.source.get("left_out", [])


def _doc_fields(cls):  # the fields a document holds: those without a default
    return [f for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]


def result_of(cal: Calibration, run, stages: list[str], mode: str, source: dict, notes: list[str],
              log=None) -> CalibrationResult:
    """The ``CalibrationResult`` of a fit: its ``document`` with the objects beside it."""
    return CalibrationResult.from_json(document(cal, run, stages, mode, source, notes), calibration=cal, run=run,
                                       log=log)


def save(doc: dict, path) -> None:
    for k, v in doc["scalars"].items():
        if not math.isfinite(v):  # never write a file ``load`` would refuse
            raise PolytraceError(f"{path}: scalar {k} is {v}; nothing written")
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")


def load(path) -> dict:
    """A calibration file, checked: format and version, every scalar a finite number in range."""
    p = Path(path)
    if not p.is_file():
        raise PolytraceError(f"--calibration {p}: no such file" if not p.exists()
                             else f"--calibration {p}: not a regular file")
    try:
        if p.stat().st_size > _MAX_FILE_BYTES:
            raise PolytraceError(f"--calibration {p}: {p.stat().st_size:,} bytes is not a calibration file")
        doc = json.loads(p.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError) as exc:
        raise PolytraceError(f"--calibration {p}: not a readable JSON file ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PolytraceError(f"--calibration {p}: not a polytrace calibration file (write one with "
                             "'polytrace calibrate LOG -o cal.json')")
    if doc.get("version") != VERSION:
        raise PolytraceError(f"--calibration {p}: version {doc.get('version')!r}; this polytrace reads "
                             f"version {VERSION}")
    scalars = doc.get("scalars")
    if not isinstance(scalars, dict) or not scalars:
        raise PolytraceError(f"--calibration {p}: no scalars")
    from ..stepmodel.efficiency import prior_scalars

    known = set(prior_scalars())  # every name a calibration writes and the estimate reads
    clean = {}
    for k, v in scalars.items():
        if not isinstance(k, str) or not _SCALAR.match(k):
            raise PolytraceError(f"--calibration {p}: scalar name {str(k)[:80]!r} is not <kind>_slowdown or "
                                 "<stage>_overhead_s")
        if k not in known:  # a hand-edited typo ("rollout_slowdwn") would price nothing, unsaid
            raise PolytraceError(f"--calibration {p}: scalar {k} is none of the {len(known)} the step model reads "
                                 "(<group>_slowdown, <group>_<family>_slowdown, <stage>_overhead_s)")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise PolytraceError(f"--calibration {p}: scalar {k} is {v!r}, not a finite number")
        if k.endswith("_slowdown") and not 0 < v <= _MAX_SLOWDOWN:
            raise PolytraceError(f"--calibration {p}: {k} = {v} is outside (0, {_MAX_SLOWDOWN:g}]")
        if k.endswith("_overhead_s") and abs(v) > _MAX_OVERHEAD_S:
            raise PolytraceError(f"--calibration {p}: {k} = {v} s is outside +-{_MAX_OVERHEAD_S:g} s")
        clean[k] = float(v)
    model = doc.get("model")
    if not (isinstance(model, dict) and isinstance(model.get("family"), str) and isinstance(model.get("name"), str)):
        raise PolytraceError(f"--calibration {p}: no model family (model.family)")
    if not isinstance(doc.get("gpu"), str):
        raise PolytraceError(f"--calibration {p}: no GPU")
    config = doc.get("config")
    if isinstance(config, dict) and isinstance(config.get("model"), str) and config["model"] != model["name"]:
        # both are written from one run: a mismatch is a hand edit, and which model it prices is unclear
        raise PolytraceError(f"--calibration {p}: model.name {model['name'][:80]!r} and config.model "
                             f"{config['model'][:80]!r} differ; the file names two models")
    # provenance fields the estimate echoes into its output: checked, so no NaN or a traceback
    # comes out of a hand-edited file
    from ..stepmodel.mode_args import MODES

    if "mode" in doc and doc["mode"] not in MODES:
        raise PolytraceError(f"--calibration {p}: mode {str(doc['mode'])[:80]!r} is not one of {', '.join(MODES)}")
    source = doc.get("source", {})
    if not isinstance(source, dict) or not isinstance(source.get("kind", ""), str):
        raise PolytraceError(f"--calibration {p}: source must be an object whose kind is a string")
    derived = source.get("derived", {})  # stage constant -> how it was derived (rundefaults.copied_constants)
    if not (isinstance(derived, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in derived.items())):
        raise PolytraceError(f"--calibration {p}: source.derived is {str(derived)[:60]!r}, not an object of "
                             "texts (which stage constants were copied from another stage)")
    _check_split(p, doc.get("split"))
    overlapped = doc.get("overlapped", [])
    if not (isinstance(overlapped, list) and all(isinstance(x, str) for x in overlapped)):
        raise PolytraceError(f"--calibration {p}: overlapped is {str(overlapped)[:60]!r}, not a list of stage names")
    out = dict(doc)
    out["scalars"] = clean
    out["path"] = str(p)
    return out


def _check_split(p: Path, split) -> None:
    """The calibration window's split per stage (``fit.Calibration.split``), which the range of an
    estimate reads (``ranges.estimate_range``): absent or empty in files written before it; else each
    stage's seconds finite and non-negative, its constant range two of them in order, its families'
    seconds a mapping of them, so a hand-edited file fails here, named, not inside the range."""
    if split is None or split == {}:
        return
    if not isinstance(split, dict):
        raise PolytraceError(f"--calibration {p}: split must be an object of stages")

    def seconds(v) -> bool:
        return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0

    for stage, info in split.items():
        where = f"--calibration {p}: split/{str(stage)[:40]}"
        if not isinstance(info, dict):
            raise PolytraceError(f"{where} must be an object")
        for k in ("mean_actual_s", "constant_s"):
            if not seconds(info.get(k)):
                raise PolytraceError(f"{where}/{k} is {str(info.get(k))[:40]!r}, not a finite number of seconds >= 0")
        rng = info.get("constant_range_s")
        if not (isinstance(rng, list) and len(rng) == 2 and all(map(seconds, rng)) and rng[0] <= rng[1]):
            raise PolytraceError(f"{where}/constant_range_s is {str(rng)[:60]!r}, not [low, high] seconds >= 0")
        for k in ("families_s", "prior_families_s"):
            fams = info.get(k, {})
            if not isinstance(fams, dict):
                raise PolytraceError(f"{where}/{k} must be an object of family seconds")
            for f, v in fams.items():
                if not seconds(v):
                    raise PolytraceError(f"{where}/{k}/{str(f)[:40]} is {str(v)[:40]!r}, not a finite number of "
                                         "seconds >= 0")
        if not isinstance(info.get("identified", True), bool):
            raise PolytraceError(f"{where}/identified must be true or false")


def check_applies(doc: dict, model: ModelSpec, gpu_slug: str) -> list[str]:
    """Refuse a calibration of another model family; warn about another GPU or model size."""
    fam = model_family(model)
    where = doc.get("path", "calibration")
    cal_model = doc["model"]
    if cal_model["family"] != fam:
        raise PolytraceError(f"--calibration {where} was fitted on {cal_model['name']} ({cal_model['family']} family); "
                             f"--model {model.name} is {fam}: calibrate on a run of that family, or drop --calibration")
    warnings = []
    if doc["gpu"] != gpu_slug:
        warnings.append(f"--calibration {where} was fitted on {doc['gpu']}, applied to {gpu_slug}: the slowdowns may "
                        "not transfer")
    if cal_model["name"] != model.name:
        warnings.append(f"--calibration {where} was fitted on {cal_model['name']}, applied to {model.name} "
                        "(same family)")
    return warnings


# --- stage averages ----------------------------------------------------------------------------


def parse_stage_times(text: str) -> dict[str, float]:
    """``gen=S,old_log_prob=S,update_actor=S[,ref=S,values=S,update_critic=S,step=S]``."""
    out: dict[str, float] = {}
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in STAGES + ("step",):
            raise PolytraceError(f"--stage-times: {part[:60]!r} is not STAGE=SECONDS with STAGE one of "
                                 f"{', '.join(STAGES + ('step',))}")
        try:
            v = float(value)
        except ValueError:
            v = float("nan")
        if not math.isfinite(v) or v <= 0 or v > 1e7:
            raise PolytraceError(f"--stage-times: {name}={value.strip()[:40]!r} is not a positive number of seconds")
        if name in out:
            raise PolytraceError(f"--stage-times: {name} is given twice")
        out[name] = v
    return out


def required_stages(run) -> list[str]:
    need = ["gen"]
    if not run.old_log_prob_in_gen:
        need.append("old_log_prob")
    if run.use_ref:
        need.append("ref")
    if run.use_critic:
        need += ["values", "update_critic"]
    return need + ["update_actor"]


def check_stage_times(times: dict, run) -> None:
    need = required_stages(run)
    missing = [s for s in need if s not in times]
    if missing:
        hints = []
        if "ref" in missing:
            hints.append("ref=S, or --no-ref for a run without a reference model")
        if "values" in missing or "update_critic" in missing:
            hints.append("values=S,update_critic=S for PPO, or --algo grpo")
        hint = f" ({'; '.join(hints)})" if hints else ""
        raise PolytraceError(f"--stage-times lacks {', '.join(missing)}: a {run.algorithm} run"
                             f"{' with a reference' if run.use_ref else ''} needs {', '.join(need)}{hint}")
    extra = [s for s in times if s not in need and s != "step"]
    if extra:
        why = {"ref": "--no-ref was given", "values": "--algo grpo has no critic",
               "update_critic": "--algo grpo has no critic"}
        raise PolytraceError(f"--stage-times gives {', '.join(extra)}, which this run does not have "
                             f"({'; '.join(why.get(s, s) for s in extra)})")


def calibrate_stage_times(times: dict, profile, run, *, seed: int = 0) -> tuple[Calibration, list[int]]:
    """Fit the scalars to a run known only by its per-stage averages: the model prices
    ``STAGE_TIMES_STEPS`` batches sampled from the profile for ``run``, and the averages of those
    prices are matched to ``times`` (taken as exact to 1%)."""
    check_stage_times(times, run)
    steps = list(range(STAGE_TIMES_STEPS))
    comps: dict[str, dict[str, list]] = {}
    fams: dict[str, dict[tuple, float]] = {}  # stage -> (kind, family) -> seconds, summed over the batches
    bounds: dict[str, dict[str, float]] = {}  # ... and their peak-roofline bound
    other = []
    for st in steps:
        batch = profile.sample(step=st, seed=seed, prompts=run.prompts_per_step)
        p = np.asarray(batch.prompt_lens, dtype=np.int64)
        r = np.minimum(np.asarray(batch.response_lens, dtype=np.int64), run.max_response_len)
        costs = stage_costs(run, p, np.maximum(r, 1))
        for s, parts in costs.components.items():
            for g, v in parts.items():
                comps.setdefault(s, {}).setdefault(g, []).append(v)
        for s, parts in by_family(costs.parts).items():
            for gf, v in parts.items():
                fams.setdefault(s, {})[gf] = fams.get(s, {}).get(gf, 0.0) + v / len(steps)
        for s, parts in roofline_bounds(costs.parts).items():
            for g, v in parts.items():
                bounds.setdefault(s, {})[g] = bounds.get(s, {}).get(g, 0.0) + v / len(steps)
        other.append(costs.other_s)
    x = {s: {g: float(np.mean(v)) for g, v in parts.items()} for s, parts in comps.items()}
    stages = [s for s in STAGES if s in times]
    actual = {s: times[s] for s in stages}
    actual["step"] = times.get("step", sum(actual.values()) + float(np.mean(other)))
    if actual["step"] <= sum(times[s] for s in stages):
        raise PolytraceError(f"--stage-times: step={actual['step']:g} s is not more than the stages' sum "
                             f"{sum(times[s] for s in stages):g} s")
    row = StepData(0, {}, actual, {}, x=x, other_s=float(np.mean(other)), bound=bounds, families=fams)
    cal = fit([row], stages, source="--stage-times",
              options=FitOptions(noise={s: 0.01 for s in stages}, prior=prior_for(run)))
    return cal, steps


# --- the three entry points the CLI calls ------------------------------------------------------


def calibrate_log(path, *, calibrate_steps: int = 10, overrides: Overrides | None = None):
    """Calibrate on the first ``calibrate_steps`` usable steps of a log (``polytrace calibrate``):
    a ``CalibrationResult``, the calibration file's document with the calibration, the run
    it holds for and the log read beside it."""
    from .validate import _overlapped, _prepare_window

    log, run, notes, rows, split, stages = _prepare_window(path, overrides, calibrate_steps)
    window = rows[:calibrate_steps]
    if len(window) < 2:
        raise PolytraceError(f"{path}: {len(window)} usable step(s); need at least 2 to calibrate")
    cal = calibrate(window, stages, source=f"{path}, first {len(window)} steps", first_step=log.steps[0].step,
                    overlapped=_overlapped(split), prior=prior_for(run))
    source = {"kind": "log", "path": str(path), "sha256": file_sha256(log.path), "format": log.format,
              "entry": log.entry, "steps_in_log": len(log.steps)}
    return result_of(cal, run, stages, split.mode, source, notes + cal.notes, log=log)


def calibrate_from_log(path, out, *, calibrate_steps: int = 10, overrides=None) -> CalibrationResult:
    """``polytrace calibrate LOG -o cal.json``: fit on the log's first steps, write the file."""
    res = calibrate_log(path, calibrate_steps=calibrate_steps, overrides=overrides)
    save(res.to_json(), out)
    return res


def calibrate_from_stage_times(stage_times: str, out, *, model, gpu, gpus: int, profile: str = "dapo-math-32b",
                               seed: int = 0, **config_kw) -> CalibrationResult:
    """``polytrace calibrate --stage-times ... -o cal.json``: fit on per-stage averages, with
    lengths sampled from the profile for the stated configuration."""
    from ..stepmodel.estimate import build_config, with_group_size
    from ..workload.profiles import get_profile

    times = parse_stage_times(stage_times)
    prof = get_profile(profile)
    run = build_config(prof, model, gpu, gpus, **config_kw)
    prof = with_group_size(prof, run.n)
    cal, steps = calibrate_stage_times(times, prof, run, seed=seed)
    source = {"kind": "stage-times", "stage_times": times, "profile": prof.name, "sampled_steps": steps, "seed": seed}
    notes = ["lengths sampled from the profile; the averages are matched by the model's prices of those batches"]
    res = result_of(cal, run, [s for s in STAGES if s in times], "sync", source, notes)
    save(res.to_json(), out)
    return res


def scalars_of(doc: dict):
    """A loaded calibration file's scalars with their provenance (``compose.scalars.Scalars``):
    fitted, from the file, on the window its source names."""
    from ..stepmodel.scalars import Scalars

    src = doc.get("source") or {}
    steps = src.get("calibration_steps")
    n = len(steps) if isinstance(steps, (list, tuple)) else steps
    window = f"{src.get('kind', 'unknown source')}" + (f", {n} calibration steps" if n else "")
    return Scalars.fitted(doc["scalars"], doc["path"], window)


def _applicable(calibration_path, model, gpu):
    from ..run.hardware import get_gpu
    from ..run.models import get_model

    doc = load(calibration_path)
    spec = get_model(model) if not isinstance(model, ModelSpec) else model
    return doc, spec, check_applies(doc, spec, get_gpu(gpu).slug)


def compare_calibrated(calibration_path, profile, model, gpu, gpus: int, **kw):
    """``polytrace estimate ... --compare-modes --calibration cal.json``: the execution modes side
    by side with the file's scalars (``compose.modes.compare_modes``), checked as
    ``estimate_calibrated`` checks them; its warnings go to every mode. A ``ModeComparison``."""
    from ..stepmodel.modes import compare_modes

    doc, spec, warnings = _applicable(calibration_path, model, gpu)
    cmp = compare_modes(profile, spec, gpu, gpus, calibration=scalars_of(doc), **kw)
    for res in cmp.results.values():
        res.warnings = warnings + res.warnings
        res.source += f" (calibration {doc['path']}: {doc['model']['name']} on {doc['gpu']})"
    return cmp


def estimate_calibrated(calibration_path, profile, model, gpu, gpus: int, **kw):
    """``polytrace estimate ... --calibration cal.json``: the estimate with the file's scalars,
    refused for another model family, with a warning for another GPU or model size; ``mode``
    and the split flags as ``compose.modes.mode_estimate`` takes them."""
    from ..stepmodel.modes import mode_estimate

    doc, spec, warnings = _applicable(calibration_path, model, gpu)
    res = mode_estimate(profile, spec, gpu, gpus, calibration=scalars_of(doc), **kw)
    if res.timings_used:
        warnings.append(f"--calibration {doc['path']} was fitted on roofline prices; measured kernel timings price "
                        "part of this estimate, so the slowdowns may over- or under-correct those families")
    res.warnings = warnings + res.warnings
    res.calibration = {"path": doc["path"], "model": doc["model"]["name"], "gpu": doc["gpu"],
                          "mode": doc.get("mode"), "source": (doc.get("source") or {}).get("kind"),
                          "scalars": doc["scalars"]}
    res.source += f" (calibration {doc['path']}: {doc['model']['name']} on {doc['gpu']})"
    if doc.get("split") and res.summary.get("mean_stages_s"):  # files before the split have none
        from ..stepmodel.result import StepRange
        from ..stepmodel.scalars import Scalars
        from .ranges import estimate_range, guard_estimate

        overlapped = tuple(doc.get("overlapped") or ())
        res.range = StepRange.from_json(estimate_range(res.summary, doc["split"], overlapped))
        # a range past 2x moves toward the zero-shot estimate of the same configuration (issue 36 item
        # 6): the priors' one, as `estimate` without --calibration prices it (no Amdahl table needed)
        zero_shot = mode_estimate(profile, spec, gpu, gpus, **{**kw, "calibration": Scalars.priors(), "amdahl": None})
        guard_estimate(res, zero_shot, overlapped)
    return res
