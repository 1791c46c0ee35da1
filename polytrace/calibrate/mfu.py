"""What a verl log measures about its own hardware: ``perf/mfu/actor`` tells which GPU class it ran on.

verl logs the update's MFU as ``FLOPs * ppo_epochs / (delta_time * peak * world_size)``
(``verl/utils/flops_counter.py``: ``FlopsCounter.estimate_flops`` and ``get_device_flops``; the key
was ``mfu/actor`` before verl grouped it under ``perf/``: the MI300X logs of verl's baseline page
print ``mfu/actor:0.151``, and ``MFU_KEYS`` reads both), where
``peak`` is the bf16 peak of the device *verl detected* by name (its ``_DEVICE_FLOPS`` table) and the
FLOPs are ``6 * dense_N * tokens`` plus an attention term (``dense_N``: every linear layer per
layer, plus the embedding and LM head both counted, ``2 * vocab * hidden``). So from the log's own
MFU, tokens (``perf/total_num_tokens``) and update seconds, with the model's shape, the peak verl
divided by comes back: ``peak = FLOPs / (t_update * mfu * world)``.

``timing_s/update_actor`` also holds what verl's timer leaves out (parameter and optimizer offload
around the update), so the peak read back is a little low: 0.88-1.00 of verl's on the shared logs
whose GPU is known (the play-verl logs on 8x H100 read back 871-985 against 989). A reading is
taken as the class whose peak lies nearest on a log scale, within ``[LOW, HIGH]`` of it; verl lumps
devices of one peak (H100, H800, H200 all 989), so a class is a set of presets, and the commonest
(``PREFERRED``) is the one priced. ``perf/max_memory_reserved_gb`` does not narrow it: it exceeds
the card's memory on logs whose card is known (55.0 GiB on the OPD run's A800 40GB, per its wandb
metadata; 106.6 GiB on play-verl's H100 80GB), so it is no per-device bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..run.hardware import GPUS

# verl's ``_DEVICE_FLOPS`` (verl/utils/flops_counter.py, 2025; the first name found in the device
# name wins, in this order), TFLOP/s. Older verl (0.2-0.4) had the same numbers for the devices
# it knew and ``inf`` (MFU 0, not logged as a reading here) for the rest; MI300X was 1336 there.
VERL_PEAKS = (("GB200", 2500.0), ("B200", 2250.0), ("MI300X", 1307.0), ("MI355X", 2500.0), ("MI350X", 2300.0),
              ("H100", 989.0), ("H800", 989.0), ("H200", 989.0), ("GH200", 989.0), ("A100", 312.0),
              ("A800", 312.0), ("L40S", 362.05), ("L40", 181.05), ("A40", 149.7), ("L20", 119.5),
              ("H20", 148.0), ("910B", 354.0))
# The read-back peak over verl's: offload outside verl's timer lowers it (0.88 on the play-verl
# "minimal" run, param and optimizer offload on), rounding of a 3-decimal MFU moves it by
# <= 0.5/45 = 1.1% at the smallest MFU in the corpus (0.045), and the attention term's coefficient
# differs between verl versions (12 before 2025, 6 after: under 2% of the FLOPs at the corpus's
# lengths). Past these the reading names no class.
LOW, HIGH = 0.80, 1.06
# Devices older verl scored against another device's peak: its table matched names by substring,
# the first hit winning, so "H20" matched an H200 until verl bd94bd61f (2025-06-06, "fix flops for
# H200 (#1877)") and "L40" an L40S until ce8906371 (2025-08-22). A log's verl version is seldom
# printed, and a run after those dates may still pin an older verl, so a reading of those classes
# keeps both devices (nominal first) and the roofline test of ``gpuinfer`` chooses; the date the
# run started (``TrainingLog.started``) only goes into the note. (class peak, preset, verl's fix)
LEGACY = ((148.0, "h200", "2025-06-06"), (181.05, "l40s", "2025-08-22"))
# The update's MFU under verl's names, newest first (module docstring): one log prints one of them.
MFU_KEYS = ("perf/mfu/actor", "mfu/actor")
# The preset of a class priced when nothing else narrows it: the commonest training part.
PREFERRED = ("h100-sxm", "a100-80g", "b200", "mi300x")


def verl_peak(gpu) -> float | None:
    """The bf16 peak verl would divide by on ``gpu`` (a ``hardware.GPU``), from its device name."""
    name = gpu.name.upper().replace("-", " ")
    for key, peak in VERL_PEAKS:
        if key in name:
            return peak
    return None


def verl_flops(model, tokens: float, seqlen_sq_sum: float, attn_coeff: float = 9.0) -> float:
    """FLOPs of one update as verl counts them (module docstring); ``attn_coeff`` between verl's
    6 and 12 (the midpoint: the reading's error from it is under 1% here)."""
    dense = model._body_params(True) + 2 * model.vocab * model.hidden
    return 6.0 * dense * tokens + attn_coeff * seqlen_sq_sum * model.head_dim * model.heads * model.layers


@dataclass
class MfuReading:
    peak_tflops: float  # median over steps of the peak read back
    spread: tuple  # its 10th and 90th percentiles
    steps: int
    verl_class: float | None  # the peak of verl's table the reading falls on (None: none)
    candidates: tuple  # presets of that class
    # the update's useful FLOP/s per GPU as verl counts them (``FLOPs / (t * world)``, no MFU in
    # it), its 10th and 90th percentiles over steps: a device slower than this cannot have run it
    achieved: tuple = (0.0, 0.0)
    legacy: tuple = ()  # (preset, verl's fix date) of ``LEGACY`` devices in ``candidates``
    started: str = ""  # the date the run started, where the log prints one

    @property
    def choice(self) -> str | None:
        if not self.candidates:
            return None
        return next((p for p in PREFERRED if p in self.candidates), self.candidates[0])

    def say(self) -> str:
        lo, hi = self.spread
        if self.verl_class is None:
            return (f"perf/mfu/actor reads back a {self.peak_tflops:.0f} TFLOP/s peak ({lo:.0f}-{hi:.0f} over "
                    f"{self.steps} steps), no device of verl's table")
        old = "".join(f"; {slug} too: verl before {fix} scored it against this class's peak"
                      + (f" (the run started {self.started})" if self.started else "") for slug, fix in self.legacy)
        return (f"perf/mfu/actor reads back a {self.peak_tflops:.0f} TFLOP/s peak ({lo:.0f}-{hi:.0f} over {self.steps} "
                f"steps): verl's {self.verl_class:g} TFLOP/s class ({', '.join(self.candidates)}){old}")


def _samples(log, run) -> list[tuple[float, float]]:
    """(MFU as logged, the update's useful TFLOP/s per GPU by verl's count) of each step that
    logs both an MFU and the update's seconds (module docstring)."""
    model = getattr(run, "model", None)
    if model is None or not getattr(log, "steps", None):  # a run priced without a model shape
        return []
    epochs = float(log.config.get("actor_rollout_ref.actor.ppo_epochs", 1) or 1)
    world = run.n_gpus
    seqs = run.prompts_per_step * run.n
    out = []
    for s in log.steps:
        m = s.metrics
        mfu = next((m[k] for k in MFU_KEYS if k in m), None)
        t = s.timings.get("update_actor")
        if mfu is None or not (t and math.isfinite(mfu) and math.isfinite(t) and mfu >= 0 and t > 0):
            continue
        length = m.get("prompt_length/mean", 0.0) + m.get("response_length/mean", 0.0)
        tokens = m.get("perf/total_num_tokens") or length * seqs
        if not tokens or not math.isfinite(tokens):
            continue
        out.append((mfu, verl_flops(model, tokens, seqs * length * length) * epochs / (t * world) / 1e12))
    return out


def read_mfu(log, run) -> MfuReading | None:
    """The peak the log's MFU was computed against (module docstring), or None where the log has
    no MFU (verl < 0.3, an unknown device: 0) or no update timing."""
    samples = [(mfu, rate) for mfu, rate in _samples(log, run) if mfu > 0]
    if not samples:
        return None
    peaks = [rate / mfu for mfu, rate in samples]
    rates = [rate for _mfu, rate in samples]
    peak = float(np.median(peaks))
    spread = (float(np.percentile(peaks, 10)), float(np.percentile(peaks, 90)))
    classes = sorted({p for _k, p in VERL_PEAKS}, key=lambda p: abs(math.log(peak / p)))
    near = classes[0] if LOW <= peak / classes[0] <= HIGH else None
    cands = ()
    if near is not None:
        cands = tuple(g.slug for g in GPUS.values() if verl_peak(g) == near)
    legacy = tuple((slug, fix) for cls, slug, fix in LEGACY if cls == near and slug in GPUS and slug not in cands)
    achieved = (float(np.percentile(rates, 10)), float(np.percentile(rates, 90)))
    return MfuReading(peak, spread, len(peaks), near, cands + tuple(s for s, _ in legacy), achieved, legacy,
                      getattr(log, "started", ""))


# Device names verl's table has held since it first logged MFU (41f645db7, 2025-01-19; H200 and L40S
# through the "H20" and "L40" substrings): on these verl never prints an MFU of 0.
ALWAYS_KNOWN = ("H100", "H800", "H20", "A100", "A800", "L40", "L20", "910B")
# An MFU printed as 0 is below 0.0005 (3 decimals); a device is ruled out where its update would
# print at least twice that (the reading's error, module docstring, is far below 2x).
ZERO_MFU_FLOOR = 0.001


def zero_mfu_rules_out(log, run, slugs) -> dict[str, str]:
    """Where every step logs its update's MFU as 0 (verl had no peak for the device, e.g. B200
    before 0807da911, 2025-08-14), the presets of ``slugs`` that verl has always known and whose
    peak would have printed a non-zero MFU for this update, each with the MFU it would print."""
    samples = _samples(log, run)
    if len(samples) < 2 or any(mfu > 0 for mfu, _rate in samples):
        return {}
    rate = float(np.median([r for _m, r in samples]))
    out = {}
    for slug in slugs:
        gpu = GPUS.get(slug)
        peak = verl_peak(gpu) if gpu is not None else None
        if peak and any(k in gpu.name.upper() for k in ALWAYS_KNOWN) and rate / peak >= ZERO_MFU_FLOOR:
            out[slug] = (f"the log's MFU is 0.000 on all {len(samples)} steps, which verl prints only for a device its "
                         f"table lacks; on {slug} it would read {rate / peak:.3f}")
    return out


def check_gpu(reading: MfuReading | None, gpu) -> str | None:
    """A note when the GPU priced is not what the log's MFU reads (``reading``), naming both."""
    if reading is None:
        return None
    if reading.verl_class is not None and gpu.slug in reading.candidates:
        return None
    mine = verl_peak(gpu)
    what = f"{mine:g} TFLOP/s in verl's table" if mine else "not in verl's table"
    return (f"GPU check: the GPU priced is {gpu.slug} ({what}) but {reading.say()}; priced on {gpu.slug} as "
            f"given: check --gpu or the publisher's statement")
