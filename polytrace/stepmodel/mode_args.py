"""What each execution mode (``modes.py``) accepts: the mode names and one-line errors, naming the
flag, for arguments a mode cannot take. Each value's own type and bounds are checked when the
``RunSpec`` is built (``run/spec.py``); these are the checks across values and the cluster size."""

from __future__ import annotations

from ..errors import PolytraceError
from ..run.spec import Mode

MODES = ("sync", "one-step-off", "fully-async")


def check_mode_args(m: Mode, gpus: int) -> None:
    """One-line errors naming the flag for arguments a mode cannot take."""
    mode, rollout_gpus, train_gpus, staleness = m.mode, m.rollout_gpus, m.train_gpus, m.staleness
    partial_rollout, updates_per_sync, in_flight_updates = m.partial_rollout, m.updates_per_sync, m.in_flight_updates
    pipelined_sync, checkpoint_engine = m.pipelined_sync, m.checkpoint_engine
    if mode not in MODES:
        raise PolytraceError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    if in_flight_updates is not None and mode not in ("one-step-off", "fully-async"):
        raise PolytraceError(f"--in-flight-updates applies to --mode one-step-off or fully-async (NeMo RL's async "
                             f"GRPO), not --mode {mode}")
    if mode == "sync":
        given = [flag for flag, v in (("--rollout-gpus", rollout_gpus), ("--train-gpus", train_gpus),
                                      ("--pipelined-sync", pipelined_sync),
                                      ("--checkpoint-engine", checkpoint_engine),
                                      ("--staleness", staleness), ("--partial-rollout", partial_rollout),
                                      ("--updates-per-sync", updates_per_sync)) if v is not None]
        if given:
            raise PolytraceError(f"{given[0]} applies to --mode one-step-off or fully-async; --mode sync colocates "
                                 f"rollout and training on all --gpus")
        return
    if mode == "one-step-off":
        for flag, v in (("--staleness", staleness), ("--partial-rollout", partial_rollout),
                        ("--updates-per-sync", updates_per_sync)):
            if v is not None:
                raise PolytraceError(f"{flag} applies to --mode fully-async (one-step-off is staleness 1, "
                                     f"no partial rollout, one update per sync)")
    if gpus < 2:
        raise PolytraceError(f"--mode {mode} puts the rollout and the trainer on GPUs of their own: --gpus {gpus} "
                             f"is too few (at least 2)")
    if rollout_gpus is not None and train_gpus is not None and rollout_gpus + train_gpus != gpus:
        raise PolytraceError(f"--rollout-gpus {rollout_gpus} + --train-gpus {train_gpus} = "
                             f"{rollout_gpus + train_gpus}, not --gpus {gpus}")
    for flag, v in (("--rollout-gpus", rollout_gpus), ("--train-gpus", train_gpus)):
        if v is not None and v >= gpus:
            raise PolytraceError(f"{flag} {v} leaves no GPU for the other side of --gpus {gpus}")
    # each value's own type and bounds were checked when the RunSpec was built (run/spec.py)
