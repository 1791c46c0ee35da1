"""Cases of the workload suite (``suites/test_workload.py``): sampling throughput of the workload
model, goal >= 1M sequences per second on one core, timed on batches of 250k sequences (a quarter
second per round at the goal rate; 8 rounds on a GPU machine, where the sampler is gated).

Not a GPU benchmark: ``Profile.sample`` is numpy on the host, so these are host-clock measurements
wherever they run (``timing: host`` and ``measured_on_cpu: true`` say so, as for the packing
planner; ``measured_on`` names the machine, as for every benchmark). Checked: the sampled batch holds
the requested number of sequences, every length positive, and the same (profile, step, seed)
gives the same batch again.
"""

from __future__ import annotations

from .harness import Case, Provider
from .registry import BenchCase, Bound

SUITE = "workload"
SEQUENCES = 250_000
POLYTRACE = Provider("polytrace", kind="ours")


def _inputs(name: str):
    def make(device, seed: int):
        from polytrace.workload.profiles import get_profile

        profile = get_profile(name)
        profile.sample(step=0, seed=0, prompts=8)  # build the lookup tables outside the timing
        return profile
    return make


def _prompts(profile) -> int:
    return SEQUENCES // profile.config.n


def _bind(profile, kernels) -> Bound:
    prompts = _prompts(profile)
    return Bound(lambda: profile.sample(step=1, seed=0, prompts=prompts), graph_ok=False)


def _compare(batch, truth, profile) -> list:
    import numpy as np

    from polytrace_kernels.tolerance import Check

    want = _prompts(profile) * profile.config.n
    lens = np.asarray(batch.seq_lens)
    again = profile.sample(step=1, seed=0, prompts=_prompts(profile))
    bad = int(lens.size != want) + int((lens <= 0).sum()) + int(not np.array_equal(lens, again.seq_lens))
    return [Check("batch", float(bad), 0.0, bad == 0, "sequence count, positive lengths, same batch for the same seed",
                  "" if bad == 0 else f"{lens.size} sequences (want {want}); {int((lens <= 0).sum())} non-positive")]


def _finish(info: dict) -> None:
    median = info.get("median_s")
    info["measured_on_cpu"] = True
    info["sequences_per_s"] = info["shape"]["sequences"] / median if median else None
    info["goal_sequences_per_s"] = 1e6


def cases() -> list[BenchCase]:
    from polytrace.workload.profiles import BUILTIN, get_profile

    out = []
    for name in BUILTIN:
        n = get_profile(name).config.n
        meta = Case("workload", "profile.sample", POLYTRACE.name, "sample",
                    {"profile": name, "sequences": (SEQUENCES // n) * n}, profile=name, seed=0, step=1,
                    extra={"check_subset": "the whole batch", "check_coverage": {
                        "batch": {"checked": 1, "of": 1, "unit": "batches", "fraction": 1.0, "sample": "all",
                                  "how": "sequence count, positive lengths, same batch for the same seed"}}})
        out.append(BenchCase(SUITE, meta, POLYTRACE, _inputs(name), _bind, lambda p: None, _compare,
                             label=name, host=True, rotate_inputs=False, finish=_finish))
    return out
