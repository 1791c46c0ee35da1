"""Lengths stated by their averages: a profile's shape rescaled to a stated mean and cap.

A run planned on paper is known by its mean response, its length cap and perhaps its mean
prompt ("about 3,200 tokens on average, 4K cap"), not by a trace. ``rescale`` keeps the shape of
a single-turn profile (its skew, its pile-up at the cap, the correlation of a prompt's n
responses) and moves it to the stated figures:

- each response of the shape, drawn at the shape's own cap ``L0``, is multiplied by one factor
  ``k`` and cut at the stated cap ``L``; a response the shape had at its cap stays at the cap.
  The spread of the uncut lengths (their skew, the ranks within a group and so the group
  correlation) is the shape's; the share at the cap is the shape's or more, as a model that
  writes ``k`` times longer under a cap piles up there. ``k`` is solved once (bisection on a
  pooled reference sample of 16 steps) so that the mean is the stated one;
- where the stated mean is below what the shape's share at the cap allows (that share alone
  holds ``share x L`` tokens on average), the capped responses are scaled with the rest (the
  pile-up is not kept) and ``notes`` say so;
- a stated mean prompt scales the prompt lengths in proportion; their cap is the longest
  rescaled prompt of the reference sample;
- a stated sequence cap ``total`` (prompt and response together: vLLM's ``max_model_len``,
  NeMo RL's ``max_total_sequence_length``, "T-Max Sequence Length" in its tables) cuts each
  response at what its own prompt leaves, ``total - prompt``, as the engine does: a 150-token
  prompt under a 1,536-token sequence cap may write 1,386 tokens, not the 965 that the longest
  prompt (571) leaves. The factor is solved with those per-response caps.

The shape's drift curve is dropped: a stated mean is the mean of every step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ...errors import PolytraceError
from ..trace.batch import Batch
from .profile import Profile

# Steps and prompts of the reference sample the factor is solved on: 4,096 groups. A shape with
# a strong group correlation and a pile-up at the cap (deepcoder-14b: 18% at its cap, whole
# groups long together) moves the mean of a few hundred groups by ~5-10%; over 4,096 the
# solved factor is within ~2% (the sampling takes ~0.1 s).
REFERENCE_STEPS = 16
REFERENCE_PROMPTS = 256
_FACTOR_RANGE = (1e-6, 1e6)
FIELDS = ("mean", "max", "total", "prompt", "shape")
LENGTHS_SYNTAX = "mean=M[,max=L][,total=T][,prompt=P][,shape=PROFILE]"


@dataclass(frozen=True)
class StatedLengths:
    """What ``--lengths`` says: ``mean`` response tokens, optionally the ``max`` (the response
    cap), the ``total`` (the sequence cap: prompt and response), the mean ``prompt`` and the
    ``shape`` (a profile name or path)."""

    mean: float
    max: int | None = None
    prompt: float | None = None
    shape: str | None = None
    total: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_lengths(text: str, flag: str = "--lengths") -> StatedLengths:
    """``"mean=3200,max=4096,prompt=300,shape=dapo-math-32b"`` -> ``StatedLengths``; one-line
    errors naming ``flag``."""
    fields: dict[str, str] = {}
    for part in str(text).split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise PolytraceError(f"{flag} {text!r}: expected {LENGTHS_SYNTAX}")
        if key not in FIELDS:
            raise PolytraceError(f"{flag}: unknown field {key!r}; fields: {', '.join(FIELDS)}")
        if key in fields:
            raise PolytraceError(f"{flag}: {key} given twice")
        fields[key] = value
    if "mean" not in fields:
        raise PolytraceError(f"{flag} {text!r}: the mean response length is required (mean=M)")

    def number(key: str, integer: bool = False) -> float | int | None:
        if key not in fields:
            return None
        try:
            x = float(fields[key])
        except ValueError:
            raise PolytraceError(f"{flag}: {key}={fields[key]!r} is not a number of tokens") from None
        if not math.isfinite(x) or x < 1:
            raise PolytraceError(f"{flag}: {key}={fields[key]} must be a finite number of tokens, at least 1")
        if integer:
            if x != int(x):
                raise PolytraceError(f"{flag}: {key}={fields[key]} must be a whole number of tokens")
            return int(x)
        return x

    stated = StatedLengths(mean=float(number("mean")), max=number("max", integer=True), prompt=number("prompt"),
                           shape=fields.get("shape"), total=number("total", integer=True))
    if stated.max is not None and stated.mean > stated.max:
        raise PolytraceError(f"{flag}: mean={stated.mean:g} is above the cap max={stated.max}: no response is "
                             f"longer than the cap, so neither is their mean")
    if stated.total is not None:
        room = stated.total - (stated.prompt or 1.0)
        if stated.mean >= room:
            prompts = f" with prompts of {stated.prompt:g} tokens" if stated.prompt else ""
            raise PolytraceError(f"{flag}: mean={stated.mean:g} does not fit under the sequence cap "
                                 f"total={stated.total}{prompts}: prompt and response together are at most the total")
        if stated.max is not None and stated.max >= stated.total:
            raise PolytraceError(f"{flag}: max={stated.max} is not below total={stated.total}: the response cap is "
                                 f"part of the sequence cap (give one of them, or max < total)")
    return stated


@dataclass
class StatedProfile(Profile):
    """A single-turn ``base`` profile's shape at a stated mean and cap (module docstring)."""

    base: Profile | None = None
    factor: float = 1.0  # responses: min(L, factor x r); the shape's capped ones at L while ``keep_capped``
    keep_capped: bool = True
    prompt_factor: float = 1.0
    total: int | None = None  # the sequence cap: each response at most ``total - its prompt``
    stated: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def sample(self, step: int = 0, seed: int = 0, prompts: int | None = None) -> Batch:
        base = self._base_with_n()
        batch = base.sample(step=step, seed=seed, prompts=self.config.prompts_per_step if prompts is None else prompts)
        cap = self.config.max_response_len
        if self.prompt_factor != 1.0:
            batch.prompt_lens = np.clip(np.rint(batch.prompt_lens * self.prompt_factor), 1,
                                        self.config.max_prompt_len).astype(np.int64)
        caps = response_caps(batch.prompt_lens, cap, self.total)
        batch.response_lens = _map_lengths(batch.response_lens, base.config.max_response_len, caps, self.factor,
                                           self.keep_capped)
        batch.capped = batch.response_lens >= caps
        batch.max_response_len = cap
        batch.meta = {**(batch.meta or {}), "profile": self.name, "shape": base.name}
        return batch

    def _base_with_n(self) -> Profile:
        cache = self.__dict__.setdefault("_bases", {})
        n = self.config.n
        if n not in cache:
            base = self.base
            cache[n] = base if base.config.n == n else dataclasses.replace(
                base, config=dataclasses.replace(base.config, n=n))
        return cache[n]

    def summary(self) -> dict:
        """What was stated, which shape and what was rescaled (printed by ``estimate``)."""
        return {"shape": self.base.name, **self.stated, "factor": self.factor, "keep_capped": self.keep_capped,
                "prompt_factor": self.prompt_factor, "notes": list(self.notes)}


def response_caps(prompt_lens, cap: int, total: int | None):
    """Each response's cap: ``cap``, and under a sequence cap ``total`` what its prompt leaves."""
    if total is None:
        return cap
    return np.minimum(cap, total - np.asarray(prompt_lens, dtype=np.int64))


def _map_lengths(resp, base_cap: int, cap, factor: float, keep_capped: bool) -> np.ndarray:
    """``min(cap, factor x r)`` (at least 1); ``cap`` one number or one per response."""
    r = np.asarray(resp, dtype=np.float64)
    out = np.clip(np.rint(factor * r), 1, cap)
    if keep_capped:
        out = np.where(r >= base_cap, cap, out)
    return out.astype(np.int64)


def _solve(fn, target: float, lo: float, hi: float, decreasing: bool) -> float:
    """``x`` in [lo, hi] (log scale) with ``fn(x)`` = ``target`` for a monotone ``fn``."""
    a, b = math.log(lo), math.log(hi)
    for _ in range(80):
        mid = 0.5 * (a + b)
        above = fn(math.exp(mid)) > target
        if above == decreasing:
            a = mid
        else:
            b = mid
    return math.exp(0.5 * (a + b))


def rescale(shape: Profile, mean: float, max_len: int | None = None, prompt: float | None = None,
            total: int | None = None) -> StatedProfile:
    """``shape`` (a single-turn ``Profile``) with responses of mean ``mean`` under the cap
    ``max_len`` (default the shape's own, or what the shortest prompt leaves under ``total``),
    prompts of mean ``prompt`` when given, and each response within what its prompt leaves of
    the sequence cap ``total`` when given."""
    if shape.kind != "single" or shape.model == "tooluse":
        raise PolytraceError(f"--lengths shape={shape.name}: a multi-turn shape (turns, tool calls); stated lengths "
                             f"take a single-turn shape, e.g. dapo-math-32b or deepcoder-14b")
    base = shape.with_drift(None)
    base_cap = int(base.config.max_response_len)
    ref = [base.sample(step=s, seed=0, prompts=REFERENCE_PROMPTS) for s in range(REFERENCE_STEPS)]
    resp = np.concatenate([b.response_lens for b in ref])
    prompts = np.concatenate([b.prompt_lens for b in ref]).astype(np.float64)
    prompt_factor = 1.0
    max_prompt = int(base.config.max_prompt_len)
    if prompt is not None:
        prompt_factor = float(prompt) / float(prompts.mean())
        # the longest rescaled prompt of the reference sample is the cap (longer draws are cut):
        # the shape's configured cap times the factor would leave a cap no run states
        max_prompt = max(1, int(math.ceil(float(prompts.max()) * prompt_factor)))
    ref_prompts = np.clip(np.rint(prompts * prompt_factor), 1, max_prompt).astype(np.int64)
    if total is not None:
        if max_prompt >= total:
            raise PolytraceError(f"--lengths: total={total} leaves no response to the longest prompt ({max_prompt} "
                                 f"tokens{' at prompt=' + format(prompt, 'g') if prompt is not None else ''})")
        cap = int(max_len) if max_len is not None else int(total - ref_prompts.min())
    else:
        cap = int(max_len) if max_len is not None else base_cap
    caps = response_caps(ref_prompts, cap, total)
    if mean > float(np.mean(caps)):
        where = ("max" if max_len is not None else f"the cap of shape {base.name} (state max=L)") \
            if total is None else f"what total={total} leaves the prompts"
        raise PolytraceError(f"--lengths: mean={mean:g} is above {where} ({float(np.mean(caps)):.0f} tokens)")

    def mean_at(factor: float, keep_capped: bool = True) -> float:
        return float(_map_lengths(resp, base_cap, caps, factor, keep_capped).mean())

    notes = []
    capped_share = float((resp >= base_cap).mean())
    keep_capped = mean >= mean_at(_FACTOR_RANGE[0])
    if not keep_capped:
        notes.append(f"the shape's {capped_share:.1%} of responses at its cap cannot be kept at a mean of {mean:g} "
                     f"under a cap of {cap}: they are scaled with the rest")
    factor = _solve(lambda k: mean_at(k, keep_capped), mean, *_FACTOR_RANGE, decreasing=False)
    factor = min(factor, _FACTOR_RANGE[1])
    config = dataclasses.replace(base.config, max_response_len=cap, max_prompt_len=max_prompt)
    label = (f"mean={mean:g},max={cap}" + (f",total={total}" if total is not None else "")
             + (f",prompt={prompt:g}" if prompt is not None else ""))
    mapped = _map_lengths(resp, base_cap, caps, factor, keep_capped)
    stated = {"mean": float(mean), "max": cap, "total": total, "prompt": None if prompt is None else float(prompt),
              "shape_mean": float(resp.mean()), "shape_max": base_cap, "shape_prompt_mean": float(prompts.mean()),
              "shape_capped_share": capped_share, "capped_share": float((mapped >= caps).mean())}
    out = StatedProfile(
        name=f"{base.name}@{label}", description=f"{base.name}'s shape at {label}", kind=base.kind,
        model=base.model, config=config, params=base.params, drift=None,
        source=f"rescaled from {base.name} ({base.source})", fit_stats={}, base=base, factor=factor,
        keep_capped=keep_capped, prompt_factor=prompt_factor, total=total, stated=stated, notes=notes)
    return out


def describe(prof: StatedProfile) -> str:
    """One line: the shape and what was rescaled."""
    s = prof.stated
    what = [f"responses mean {s['shape_mean']:.0f} -> {s['mean']:g} tokens (x{prof.factor:.3g}, spread and group "
            f"correlation kept), cap {s['shape_max']} -> {s['max']}: {s['capped_share']:.1%} at the cap "
            f"(the shape: {s['shape_capped_share']:.1%})"]
    if s.get("total") is not None:
        what.append(f"each response within what its prompt leaves of the sequence cap {s['total']}")
    if s["prompt"] is not None:
        what.append(f"prompts mean {s['shape_prompt_mean']:.0f} -> {s['prompt']:g}")
    return f"lengths: shape {prof.base.name} rescaled: " + "; ".join(what)


__all__ = ["LENGTHS_SYNTAX", "StatedLengths", "StatedProfile", "describe", "parse_lengths", "rescale",
           "response_caps"]
