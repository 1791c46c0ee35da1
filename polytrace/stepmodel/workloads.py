"""The workload an estimate runs on when the user does not say: each built-in profile's model and
GPU count, the default GPU and sampled steps. ``polytrace report``, ``impact`` and the gate's
step-time line share them, so they speak of the same step. ``--lengths`` (lengths stated by their
mean and cap) takes its shape here: ``stated_lengths_profile``."""

from __future__ import annotations

DEFAULT_GPU = "h200"
DEFAULT_STEPS = tuple(range(8))

# The model and cluster each built-in profile was recorded on (or, where the source does not say,
# a typical size for that model).
PROFILE_DEFAULTS = {
    "dapo-math-32b": ("qwen2.5-32b", 32),  # DAPO recipe, Qwen2.5-32B; GPU count assumed
    "deepcoder-14b": ("deepcoder-14b", 32),  # DeepCoder-14B was trained on 32 H100s
    "video-vl-7b": ("qwen2.5-vl-7b", 8),
    "search-r1-7b": ("qwen2.5-7b", 8),
    "model-b-math": ("qwen3-235b-a22b", 64),  # a 235B-class MoE stands in for the in-house Model B
    "model-b-tooluse": ("qwen3-235b-a22b", 64),
}
FALLBACK_DEFAULTS = ("qwen2.5-7b", 8)


def default_workload(profile=None, model=None, gpus=None):
    """(``Profile``, model, GPU count): the profile given (name, path or ``Profile``) or the default
    one, and the model and GPU count given or that profile's defaults."""
    from ..workload.profiles import DEFAULT_PROFILE, get_profile

    prof = get_profile(profile if profile is not None else DEFAULT_PROFILE)
    # a profile of stated lengths runs where its shape was recorded
    shape_name = getattr(prof.base, "name", prof.name) if hasattr(prof, "base") else prof.name
    d_model, d_gpus = PROFILE_DEFAULTS.get(shape_name, FALLBACK_DEFAULTS)
    return prof, model or d_model, int(gpus or d_gpus)


# The built-in single-turn shape for a task, by words in the model's name (code models write
# programs, the rest is taken for math reasoning, the common RLVR task).
TASK_SHAPES = (("coder", "deepcoder-14b"), ("code", "deepcoder-14b"), ("-vl-", "video-vl-7b"))
DEFAULT_SHAPE = "dapo-math-32b"


def nearest_shape(model=None) -> str:
    """The built-in shape for ``model``'s task (``--lengths`` without ``shape=``): the profile
    recorded on that model where one was (single-turn), else by the words of its name
    (``TASK_SHAPES``), else math reasoning (dapo-math-32b)."""
    from ..workload.profiles import get_profile

    name = str(getattr(model, "name", model or "")).lower()
    for prof, (recorded, _) in PROFILE_DEFAULTS.items():
        # Model B's profiles name a stand-in model, not the one they were recorded on
        if recorded == name and not prof.startswith("model-b") and get_profile(prof).kind == "single":
            return prof
    return next((shape for word, shape in TASK_SHAPES if word in name), DEFAULT_SHAPE)


def stated_lengths_profile(lengths, profile=None, model=None, max_response_len=None):
    """The profile of ``--lengths`` (a ``StatedLengths`` or its text): the shape named there,
    else ``profile`` when given, else the nearest built-in for ``model``'s task, rescaled to the
    stated mean, cap (default ``max_response_len``, else the shape's) and mean prompt."""
    from ..errors import PolytraceError
    from ..workload.profiles import get_profile
    from ..workload.profiles.stated import StatedLengths, parse_lengths, rescale

    stated = lengths if isinstance(lengths, StatedLengths) else parse_lengths(lengths)
    shape = stated.shape or profile or nearest_shape(model)
    cap = stated.max
    if cap is not None and max_response_len is not None and int(max_response_len) != cap:
        raise PolytraceError(f"--lengths max={cap} and --max-response-len {max_response_len} disagree; state the cap "
                             f"once")
    try:
        base = get_profile(shape)
    except PolytraceError as exc:
        raise PolytraceError(f"--lengths shape={shape}: {exc}") from None
    return rescale(base, stated.mean, cap if cap is not None else max_response_len, stated.prompt, total=stated.total)
