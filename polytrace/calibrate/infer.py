"""Settings a log leaves unstated that change a stage's cost 2x or more, chosen by model selection
on the calibration window under physical bounds.

For each such setting (``settings.REGISTRY`` entries marked ``cost_2x``) the log does not state
and ``--set`` does not give, every candidate value is a hypothesis: the window's steps are priced
under it, and for each stage the setting moves, the stage's logged times are fitted as
``a x modelled seconds + b`` with

- ``a >= ROOFLINE_FLOOR``: the run cannot be faster than the datasheet. The modelled seconds are
  priced at the assumed efficiencies (``stepmodel/efficiency.py``), the lowest of which is 0.45, so a
  stage below 0.45 of them beats the roofline. A hypothesis whose steps need that (the median
  step's time under ``ROOFLINE_FLOOR`` x its price) is rejected.
- ``0 <= b <= CONSTANT_SHARE_MAX`` x the stage's mean: constant seconds (per call, whatever the
  tokens) are at most 60% of a stage. Regressing the shared Qwen2-7B log's stage times on their
  tokens gives 32-51% (``fit.FIXED_PRIOR_SHARE``); without this bound any hypothesis fits a flat
  window by calling everything constant, and the choice between padded (cost constant in the
  lengths) and unpadded (cost growing with them) batches would be made by nothing.

Of the hypotheses left, the one whose relative misfit (root mean square over the window, averaged
over the stages it moves) is smallest wins when it beats verl's default by ``WIN_RATIO`` and by
``WIN_MARGIN``; otherwise the window does not identify the setting, verl's default stays and a
note says so. Every unstated setting gets a note either way: what was chosen and why.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import PolytraceError
from ..run.dialects import dialect_key, trainer_backend
from ..run.spec import verl_key
from ..stepmodel.rollout import kv_capacity_tokens, kv_slots
from ..stepmodel.stages import GROUPS, TRAIN_STAGES
from .settings import OFFLOAD_SWITCHES, REGISTRY, offload_key, stated

ROOFLINE_FLOOR = 0.45
CONSTANT_SHARE_MAX = 0.6
WIN_RATIO = 1.5
WIN_MARGIN = 0.01  # and 1 point of relative error better (timer noise is 1-4%)
MIN_WINDOW = 3  # steps; fewer cannot tell a trend from noise
MEMORY_FRACTIONS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# verl keys, in the order they are decided (each given the ones before)
_A, _R = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
ORDER = ("actor_rollout_ref.model.use_remove_padding", f"{_R}.tensor_model_parallel_size",
         f"{_R}.gpu_memory_utilization", f"{_R}.enforce_eager", f"{_A}.use_dynamic_bsz",
         "actor_rollout_ref.model.enable_gradient_checkpointing", f"{_A}.fsdp_config.param_offload",
         f"{_A}.fsdp_config.optimizer_offload", "actor_rollout_ref.ref.fsdp_config.param_offload")
_STAGES = {"actor_rollout_ref.model.use_remove_padding": TRAIN_STAGES,
           f"{_R}.tensor_model_parallel_size": ("gen",), f"{_R}.gpu_memory_utilization": ("gen",),
           f"{_R}.enforce_eager": ("gen",), f"{_A}.use_dynamic_bsz": ("update_actor",),
           "actor_rollout_ref.model.enable_gradient_checkpointing": ("update_actor",),
           f"{_A}.fsdp_config.param_offload": ("old_log_prob", "update_actor"),
           f"{_A}.fsdp_config.optimizer_offload": ("update_actor",),
           "actor_rollout_ref.ref.fsdp_config.param_offload": ("ref",)}
_STAGES[verl_key("remove_padding", "megatron")] = TRAIN_STAGES
_STAGES.update({offload_key("megatron", role, what): _STAGES[offload_key("fsdp", role, what)]
                for role, what, _target in OFFLOAD_SWITCHES})


def _strategy_key(log, key: str) -> str:
    """``key`` as the log's trainer names it (``run.dialects``): an FSDP offload switch becomes the
    Megatron one (``actor_rollout_ref.actor.megatron.param_offload``), the model's padding switch
    the Megatron actor's, when the trainer is Megatron."""
    return dialect_key(key, trainer_backend(log.config, getattr(log, "command", ""))[0])


_OVERHEAD_GROUPS = ("forward_overhead", "train_overhead")


@dataclasses.dataclass
class Verdict:
    key: str
    value: object
    how: str  # "inferred", "default" (not identified), "only" (the others rejected)
    note: str
    scores: dict = dataclasses.field(default_factory=dict)  # candidate -> misfit (None: rejected)


def stage_misfit(y: np.ndarray, x: np.ndarray, compute: np.ndarray) -> float | None:
    """Relative RMS misfit of ``y ~ a x + b`` under the bounds (module docstring); None when the
    stage would have to beat its roofline (``compute``: the modelled seconds that are FLOPs and
    bytes, not per-call overheads)."""
    ok = np.isfinite(y) & np.isfinite(x) & (y > 0) & (x > 0)
    y, x, compute = y[ok], x[ok], compute[ok]
    if len(y) < MIN_WINDOW:
        return 0.0
    if np.median(y / np.maximum(compute, 1e-12)) < ROOFLINE_FLOOR:
        return None
    w = 1.0 / y ** 2
    b_max = CONSTANT_SHARE_MAX * float(y.mean())

    def misfit(a: float, b: float) -> float:
        return float(np.sqrt(np.mean(((a * x + b - y) / y) ** 2)))

    best = math.inf
    # the bounded weighted least squares' optimum lies on the unconstrained solution or on a bound:
    # try each (two parameters, a handful of cases)
    sw, sx, sy = w.sum(), (w * x).sum(), (w * y).sum()
    sxx, sxy = (w * x * x).sum(), (w * x * y).sum()
    det = sw * sxx - sx * sx
    cands = []
    if det > 0:
        cands.append(((sw * sxy - sx * sy) / det, (sxx * sy - sx * sxy) / det))
    for b in (0.0, b_max):
        cands.append(((sxy - b * sx) / sxx, b))
    a = ROOFLINE_FLOOR
    cands.append((a, (sy - a * sx) / sw))
    for a, b in cands:
        a = max(a, ROOFLINE_FLOOR)
        b = min(max(b, 0.0), b_max)
        best = min(best, misfit(a, b))
    return best


# stages that run the same pass on the same worker (verl's compute_log_prob and compute_ref_log_prob):
# one slope and one constant for both, so what only one of them pays (a reference reloaded from CPU
# memory, an actor offloaded between stages) shows as the difference between them
SAME_PASS = (("old_log_prob", "ref"),)
_ENGINE_GROUPS = ("rollout", "forward", "train")


def _arrays(rows, s: str):
    y = np.array([r.actual[s] for r in rows], dtype=np.float64)
    x = np.array([sum(v for g, v in r.x[s].items() if g in GROUPS) for r in rows])
    off = np.array([sum(v for g, v in r.x[s].items() if g not in GROUPS) for r in rows])  # tool waits
    compute = np.array([sum(v for g, v in r.x[s].items() if g in _ENGINE_GROUPS) for r in rows])
    return y - off, x, compute


def _score(rows, stages) -> tuple[float | None, str]:
    """Mean misfit over the timed ``stages`` of priced ``rows`` (stages of ``SAME_PASS`` fitted
    together); None and the reason when a stage would beat its roofline."""
    def timed(s):
        return all(s in r.actual and sum(r.x.get(s, {}).values()) > 0 for r in rows)

    units: list[tuple] = []
    for s in stages:
        if not timed(s):
            continue
        pair = next((p for p in SAME_PASS if s in p and all(timed(q) for q in p)), (s,))
        if pair not in units:
            units.append(pair)
    scores = []
    for unit in units:
        parts = [_arrays(rows, s) for s in unit]
        y, x, compute = (np.concatenate([p[i] for p in parts]) for i in range(3))
        m = stage_misfit(y, x, compute)
        if m is None:
            ratio = float(np.median(y / np.maximum(compute, 1e-12)))
            return None, f"{'/'.join(unit)} would run at {ratio:.2f}x its roofline-bound price"
        scores.append(m)
    return (float(np.mean(scores)) if scores else 0.0), ""


def _candidates(key: str, run, log) -> list:
    if key == f"{_R}.tensor_model_parallel_size":
        return [tp for tp in (1, 2, 4, 8) if tp <= run.n_gpus and run.n_gpus % tp == 0]
    if key == f"{_R}.gpu_memory_utilization":
        # only fractions that change how many sequences an engine decodes at once
        per_engine = math.ceil(run.prompts_per_step * run.n / max(1, run.n_gpus // run.rollout_tp))
        seq = run.max_prompt_len + run.max_response_len
        seen, out = set(), []
        for f in MEMORY_FRACTIONS:
            slots = min(per_engine, kv_slots(run.engine_model, run.gpu, run.rollout_tp, f, seq, run.max_num_seqs))
            if kv_capacity_tokens(run.engine_model, run.gpu, run.rollout_tp, f) <= 0 or slots in seen:
                continue
            seen.add(slots)
            out.append(f)
        return out if len(out) > 1 else []
    return [False, True]


def _default(key: str, cands: list, run):
    d = REGISTRY[key].default
    if key == f"{_R}.tensor_model_parallel_size" and d not in cands:
        return cands[0]
    if key == f"{_R}.gpu_memory_utilization" and d not in cands:
        return min(cands, key=lambda f: abs(f - d))
    return d


def _hypothesis(key: str, value, log) -> dict:
    out = {key: value}
    if key == f"{_A}.use_dynamic_bsz" and value and not stated(log, f"{_A}.ppo_max_token_len_per_gpu"):
        out[f"{_A}.ppo_max_token_len_per_gpu"] = REGISTRY[f"{_A}.ppo_max_token_len_per_gpu"].default
    return out


def _unstated(log, overrides, key: str) -> bool:
    given = getattr(overrides, "settings", None) or {}
    if key in given or stated(log, key):
        return False
    if key == f"{_R}.tensor_model_parallel_size" and getattr(overrides, "rollout_tp", None):
        return False
    if key == f"{_A}.use_dynamic_bsz" and any(
            stated(log, k) or k in given for k in (f"{_A}.ppo_micro_batch_size_per_gpu", f"{_A}.ppo_micro_batch_size")):
        return False  # a micro-batch size is stated: fixed-size micro-batches
    if key.startswith("actor_rollout_ref.ref.") and key.endswith(".param_offload") and "ref" not in log.stages():
        return False
    return True


def infer_unstated(log, overrides, rows, split, configure, price) -> tuple[dict, list[Verdict]]:
    """The settings chosen for what the log leaves unstated ({verl key: value}) and a verdict per
    setting. ``configure(settings) -> RunConfig`` reads the log with those settings given;
    ``price(run, rows, split)`` fills each row's modelled seconds (``validate.price_steps``)."""
    chosen: dict = {}
    verdicts: list[Verdict] = []
    keys = [k for k in (_strategy_key(log, key) for key in ORDER) if _unstated(log, overrides, k)]
    if not keys:
        return chosen, verdicts
    base = configure({})
    if len(rows) < MIN_WINDOW:
        for key in keys:
            cands = _candidates(key, base, log)
            if not cands:
                continue
            value = _default(key, cands, base)
            chosen.update(_hypothesis(key, value, log))
            verdicts.append(Verdict(key, value, "default", f"{key} not stated; {len(rows)} usable step(s) cannot "
                                    f"identify it: verl's default {value} assumed (pass --set {key}=VALUE)"))
        return chosen, verdicts
    for key in keys:
        cands = _candidates(key, configure(chosen) if chosen else base, log)
        if not cands:
            continue
        stages = [s for s in _STAGES[key] if all(s in r.actual for r in rows)]
        if not stages:
            continue
        default = _default(key, cands, base)
        scores, why = {}, {}
        for value in cands:
            try:
                run = configure({**chosen, **_hypothesis(key, value, log)})
                window = [dataclasses.replace(r, x={}) for r in rows]
                price(run, window, split)
            except PolytraceError as exc:
                scores[value], why[value] = None, f"cannot run ({exc})"
                continue
            scores[value], why[value] = _score(window, stages)
        verdicts.append(_decide(key, default, scores, why, stages))
        chosen.update(_hypothesis(key, verdicts[-1].value, log))
    return chosen, verdicts


def _fmt(scores: dict) -> str:
    return ", ".join(f"{v}: {'rejected' if s is None else f'{100 * s:.1f}%'}" for v, s in scores.items())


def _decide(key: str, default, scores: dict, why: dict, stages) -> Verdict:
    alive = {v: s for v, s in scores.items() if s is not None}
    where = f"{key} not stated; on the calibration window ({', '.join(stages)} misfit {_fmt(scores)})"
    rejected = "; ".join(f"{v} rejected: {why[v]}" for v, s in scores.items() if s is None)
    rejected = f"; {rejected}" if rejected else ""
    if not alive:
        return Verdict(key, default, "default", f"{where}{rejected}: no value fits within the physical bounds, "
                       f"verl's default {default} kept (pass --set {key}=VALUE)", scores)
    best = min(alive, key=lambda v: alive[v])
    if default not in alive or len(alive) == 1:
        return Verdict(key, best, "only", f"{where}{rejected}: inferred {best}, the only value within the "
                       f"physical bounds (pass --set {key}=VALUE to override)", scores)
    s_def, s_best = alive[default], alive[best]
    if best != default and s_best * WIN_RATIO <= s_def and s_def - s_best >= WIN_MARGIN:
        return Verdict(key, best, "inferred", f"{where}{rejected}: inferred {best}, which fits the window's "
                       f"trend where verl's default {default} does not (pass --set {key}=VALUE to override)", scores)
    runner_up = min((s for v, s in alive.items() if v != best), default=None)
    if best == default and runner_up is not None and s_best * WIN_RATIO <= runner_up \
            and runner_up - s_best >= WIN_MARGIN:
        return Verdict(key, best, "inferred", f"{where}{rejected}: inferred {best} (verl's default), which fits "
                       f"the window's trend where the others do not (pass --set {key}=VALUE to override)", scores)
    return Verdict(key, default, "default", f"{where}{rejected}: the window does not tell the values apart; "
                   f"verl's default {default} assumed (pass --set {key}=VALUE)", scores)


def resolve_unstated(log, overrides, run, notes: list[str], rows, split, price) -> tuple:
    """``(run, notes)`` with the unstated settings decided on ``rows`` (the calibration window):
    the configuration read again with them given, and one note per setting."""
    from .logconfig import Overrides, config_from_log

    ov = overrides or Overrides()
    given = dict(ov.settings or {})

    def configure(settings: dict):
        return config_from_log(log, dataclasses.replace(ov, settings={**given, **settings}))[0]

    chosen, verdicts = infer_unstated(log, ov, rows, split, configure, price)
    if not verdicts:
        return run, notes
    if chosen:
        run, notes = config_from_log(log, dataclasses.replace(ov, settings={**given, **chosen}))
    return run, list(notes) + [f"setting: {v.note}" for v in verdicts]
