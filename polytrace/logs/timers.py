"""Which timer is which stage: verl's own names (``timing_s/gen``), names recipes use for the
same work, and the user's mapping (``--stage gen=KEY``).

A recipe that wraps the rollout in its own loop times it under another name: a GUI-agent
recipe's ``timing_s/get_batch_rollout_with_filtering`` (generation repeated until the filter keeps
a batch). Those known names are read as the stage they time when the log has no timer of the
stage's own name, and a note says so.
"""

from __future__ import annotations

from ..errors import PolytraceError

# The stages a timer can be mapped to (verl's top-level timers, the step, and the seconds kept apart).
STAGE_NAMES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
               "update_weights", "step", "testing", "save_checkpoint")
# stage -> recipes' names for the same work, first match wins; used only when the stage's own
# timer is absent from the log.
KNOWN_ALIASES = {
    "gen": ("get_batch_rollout_with_filtering", "gen_with_filtering", "rollout", "generate", "generation"),
    "step": ("step_total",),
}
_MAX_LISTED = 40


def _bare(key: str) -> str:
    key = key.strip()
    for prefix in ("timing_s/", "timing/"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def parse_stage_map(items) -> dict:
    """``["gen=timing_s/rollout", ...]`` -> ``{"gen": "rollout"}``; a bad item is a usage error."""
    out = {}
    for item in items or ():
        stage, sep, key = str(item).partition("=")
        stage, key = stage.strip(), _bare(key)
        if not sep or not stage or not key:
            raise PolytraceError(f"--stage {item!r}: expected STAGE=TIMER, e.g. gen=timing_s/my_rollout")
        if stage not in STAGE_NAMES:
            raise PolytraceError(f"--stage {item!r}: unknown stage {stage!r}; stages: {', '.join(STAGE_NAMES)}")
        if stage in out and out[stage] != key:
            raise PolytraceError(f"--stage {stage} is given twice ({out[stage]} and {key})")
        out[stage] = key
    return out


def _timers(log) -> list[str]:
    seen: dict[str, None] = {}
    for s in log.steps:
        for k in s.timings:
            seen.setdefault(k, None)
    return list(seen)


def apply_stage_map(log, mapping: dict | None, notes: list) -> None:
    """Read each mapped timer as its stage on every step (in place), then the known recipe names
    for stages the log has no timer of. An unknown timer is an error listing the log's timers."""
    mapping = dict(mapping or {})
    timers = _timers(log)
    prefix = log.timing_style or "timing_s/"
    for stage, key in mapping.items():
        if key in timers and stage != key:
            notes.append(f"timer: {prefix}{key} read as {stage} (--stage)")
        if key not in timers:
            shown = ", ".join(prefix + t for t in timers[:_MAX_LISTED])
            more = f" (and {len(timers) - _MAX_LISTED} more)" if len(timers) > _MAX_LISTED else ""
            raise PolytraceError(f"--stage {stage}={key}: {log.path} has no timer {prefix}{key}; its timers: "
                                 f"{shown or 'none'}{more}")
    for stage, names in KNOWN_ALIASES.items():
        if stage in mapping or stage in timers:
            continue
        found = next((n for n in names if n in timers), None)
        if found:
            mapping[stage] = found
            notes.append(f"timer: {prefix}{found} read as {stage} (a recipe's name for it; pass --stage "
                         f"{stage}=KEY to choose another)")
    for stage, key in mapping.items():
        if stage == key or log.timer_map.get(stage) == key:
            continue
        for s in log.steps:
            if key in s.timings:
                s.timings[stage] = s.timings[key]
        log.timer_map[stage] = key
