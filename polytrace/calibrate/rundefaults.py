"""``polytrace estimate --calibration cal.json``: the calibrated run's configuration as the
estimate's defaults. A calibration is fitted on one run (a log's, or the run a dashboard's stage
averages came from); pricing another batch, GPU count or TP with it is allowed, but silently
pricing the default profile's 96 x 8 batch at TP 1 when the run was 1024 x 5 at TP 2 is not. So
every setting the file records fills the flag the user left out, and each flag given that differs
from the run is listed. Constants the calibration did not time but copied from another stage
(``source.derived``) are named when the estimate uses them."""

from __future__ import annotations

from ..errors import PolytraceError
from ..run.spec import Decl, SpecError, declarations


def fields() -> dict[str, Decl]:
    """estimate's argparse destination -> the declaration of the setting a calibration file's
    ``config`` records (its ``config_key``): the MoE and long-context layouts (a calibrated EP 8
    run is not re-priced at EP 1), the precisions (an FP8 engine or trainer: half a stage's price
    or more) and Megatron's CPU optimizer among them."""
    return {d.argument: d for d in declarations().values() if d.config_key}


def flag_of(dest: str) -> str:
    return next((d.flag for d in declarations().values() if d.argument == dest), "--" + dest.replace("_", "-"))


def _flag_value(d: Decl, value):
    """A checked config value as its flag holds it (``--no-ref``: the reference's absence)."""
    return (not value) if d.inverted else value


def run_defaults(doc: dict) -> dict:
    """Destination -> value of the calibrated run, from a loaded calibration file (``files.load``);
    a hand-edited field of the wrong type is a one-line error naming it."""
    config = doc.get("config")
    where = doc.get("path", "calibration")
    if not isinstance(config, dict):
        raise PolytraceError(f"--calibration {where}: no config (the calibrated run's configuration)")
    out = {"gpu": doc["gpu"]}
    for dest, d in fields().items():
        value = config.get(d.config_key)
        if value is None:
            continue
        try:
            checked = d.check(value, d.config_key)
        except SpecError:  # the file and its key, not a flag the user never passed
            what = f"one of {', '.join(d.choices)}" if d.choices else "true or false" if d.kind == "bool" else (
                "a name" if d.kind == "text" else d.bounds_text())
            raise PolytraceError(f"--calibration {where}: config.{d.config_key} is {value!r} (the setting "
                                 f"{d.flag or d.name} must be {what})") from None
        out[dest] = _flag_value(d, checked)
    # the framework whose colocated switch the calibration priced (stepmodel/frameworks.py): its
    # scalars were fitted with that traffic taken out, so the estimate prices it too
    switch = [config.get(k) for k in ("engine_weights_offload", "switch_offload")]
    if any(v is not None and not isinstance(v, bool) for v in switch):
        raise PolytraceError(f"--calibration {where}: config.engine_weights_offload / switch_offload are {switch!r}")
    if any(v is not None for v in switch):
        out["framework"] = "nemo-rl" if all(switch) else "verl"
    if doc.get("mode"):
        out["mode"] = doc["mode"]
    profile = (doc.get("source") or {}).get("profile")
    if isinstance(profile, str):
        # lengths stated by their averages (``--lengths``) are recorded as "shape@mean=...": the
        # shape is the profile and the rest the --lengths that rebuilds them
        shape, at, stated = profile.partition("@")
        out["profile"] = shape
        if at:
            from ..workload.profiles.stated import parse_lengths

            try:
                parse_lengths(stated)
            except PolytraceError as exc:
                raise PolytraceError(f"--calibration {where}: source.profile {profile[:120]!r}: {exc}") from None
            out["lengths"] = stated
    return out


def apply_run_defaults(values: dict, given: set[str], doc: dict) -> tuple[dict, list[str]]:
    """``values`` (the parsed flags) with every flag not ``given`` taken from the calibrated run,
    and one line per given flag that differs from it."""
    run = run_defaults(doc)
    out, differences = dict(values), []
    for dest, value in run.items():
        if dest not in given:
            out[dest] = value
        elif values.get(dest) != value:
            shown = "on" if value is True else "off" if value is False else value
            mine = "on" if values[dest] is True else "off" if values[dest] is False else values[dest]
            differences.append(f"{flag_of(dest)} {mine} (the calibrated run: {shown})")
    return out, differences


def copied_constants(doc: dict, stages_used) -> list[str]:
    """Notes for the stages this estimate prices whose fixed seconds the calibration did not time
    but copied from another stage (``source.derived``)."""
    derived = (doc.get("source") or {}).get("derived") or {}
    notes = []
    for key, how in derived.items():
        stage = key.removesuffix("_overhead_s")
        if not key.endswith("_overhead_s") or stage not in stages_used or not isinstance(how, str):
            continue
        if how.startswith("copied from") or how == "like stage":
            seconds = doc["scalars"].get(key, 0.0)
            source = how if how.startswith("copied from") else "copied from a like stage"
            notes.append(f"{stage}: its fixed {seconds:.2f} s per step are {source}; the calibrated run had no "
                         f"{stage} stage to time")
    return notes
