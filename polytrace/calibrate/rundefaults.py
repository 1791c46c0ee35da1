"""``polytrace estimate --calibration cal.json``: the calibrated run's configuration as the
estimate's defaults. A calibration is fitted on one run (a log's, or the run a dashboard's stage
averages came from); pricing another batch, GPU count or TP with it is allowed, but silently
pricing the default profile's 96 x 8 batch at TP 1 when the run was 1024 x 5 at TP 2 is not. So
every setting the file records fills the flag the user left out, and each flag given that differs
from the run is listed. Constants the calibration did not time but copied from another stage
(``source.derived``) are named when the estimate uses them."""

from __future__ import annotations

from ..compose.stages import PRECISIONS
from ..errors import PolytraceError

# estimate's argparse destination -> (the calibration file's config key, how it is turned into the flag)
FIELDS = {
    "model": ("model", str), "gpus": ("n_gpus", int), "prompts": ("prompts_per_step", int), "n": ("n", int),
    "max_prompt_len": ("max_prompt_len", int), "max_response_len": ("max_response_len", int),
    "rollout_tp": ("rollout_tp", int), "strategy": ("strategy", str), "train_tp": ("train_tp", int),
    "train_pp": ("train_pp", int), "algo": ("algorithm", str), "no_ref": ("use_ref", lambda v: not v),
    "lora_rank": ("lora_rank", int), "param_offload": ("param_offload", bool),
    "optimizer_offload": ("optimizer_offload", bool), "micro_batch_tokens": ("micro_batch_tokens", int),
    "mem_fraction": ("mem_fraction", float),
    # the MoE and long-context layouts (a calibrated EP 8 run is not re-priced at EP 1)
    "train_ep": ("train_ep", int), "train_cp": ("train_cp", int), "train_vpp": ("train_vpp", int),
    "rollout_ep": ("rollout_ep", int),
    # an FP8 engine or trainer (``RunConfig.rollout_precision``): half a stage's price or more
    "rollout_precision": ("rollout_precision", str), "train_precision": ("train_precision", str),
    # Megatron's CPU optimizer: the update's optimizer step in host memory
    "cpu_optimizer": ("cpu_optimizer", float), "cpu_optimizer_overlap": ("cpu_optimizer_overlap", bool),
}
FLAG = {"no_ref": "--no-ref", "algo": "--algo"}


def flag_of(dest: str) -> str:
    return FLAG.get(dest, "--" + dest.replace("_", "-"))


def _valid(dest: str, convert, value) -> bool:
    if dest in ("rollout_precision", "train_precision"):
        return value in PRECISIONS
    if dest == "cpu_optimizer":
        return not isinstance(value, bool) and isinstance(value, (int, float)) and 0.0 <= value <= 1.0
    if convert is str:
        return isinstance(value, str) and bool(value)
    if convert is bool or dest == "no_ref":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN
        return False
    lowest = 0 if dest == "lora_rank" else 1e-9
    return value >= lowest and value < 1e12 and (convert is float or value == int(value))


def run_defaults(doc: dict) -> dict:
    """Destination -> value of the calibrated run, from a loaded calibration file (``files.load``);
    a hand-edited field of the wrong type is a one-line error naming it."""
    config = doc.get("config")
    where = doc.get("path", "calibration")
    if not isinstance(config, dict):
        raise PolytraceError(f"--calibration {where}: no config (the calibrated run's configuration)")
    out = {"gpu": doc["gpu"]}
    for dest, (key, convert) in FIELDS.items():
        value = config.get(key)
        if value is None:
            continue
        if not _valid(dest, convert, value):
            raise PolytraceError(f"--calibration {where}: config.{key} is {value!r}")
        out[dest] = convert(value)
    # the framework whose colocated switch the calibration priced (compose/frameworks.py): its
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
            from ..profiles.stated import parse_lengths

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
