"""The workload an estimate runs on when the user does not say: each built-in profile's model and
GPU count, the default GPU and sampled steps. ``polytrace report``, ``impact`` and the gate's
step-time line share them, so they speak of the same step."""

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
    from ..profiles import DEFAULT_PROFILE, get_profile

    prof = get_profile(profile if profile is not None else DEFAULT_PROFILE)
    d_model, d_gpus = PROFILE_DEFAULTS.get(prof.name, FALLBACK_DEFAULTS)
    return prof, model or d_model, int(gpus or d_gpus)
