"""One case, both revisions: the same inputs, both outputs checked, rounds interleaved.

1. **Inputs once.** CAND's ``make_inputs(device, seed)`` builds them; both revisions bind them
   (each with its own suite code and its own kernels), so both time the very same tensors.
2. **Outputs, outside any timing.** BASE's fp64 reference (``truth``) is computed first (a
   provider may write into its inputs), then each revision's output is produced once and judged
   by BASE's ``compare`` (the kernel tests' bounds, ``polytrace_kernels.tolerance`` of BASE): the
   bar the main branch's tests hold, so a pull request cannot loosen the check it is judged by.
   The two outputs are also compared with each other (``output_diff``: max |CAND - BASE|).
3. **Rounds interleaved.** Both are timed by CAND's ``suites/timing.py`` with one plan (CUDA events
   or a CUDA-graph replay, L2 flushed; when one revision cannot use the plan the other got, both
   fall back to the same one). Host-clock plans (host work such as the planner, and everything in
   the CPU interpreter) are read as the process's CPU time (``time.process_time``, ``timing:
   host-cpu``) instead of wall time: on a shared machine another process's time slice would land
   on one side of a pair only (on this project's 2-core CI machine, wall-clock pairs of a 2x
   slowdown flipped often enough to lift p past 0.002 under load; CPU time does not see them). After
   ``WARMUP_PAIRS`` untimed pairs, each pair runs BASE and CAND back to back in an order drawn per
   pair from a seeded generator (``first``: "B" or "C"), so drift hits both alike and neither
   always runs on a cache the other warmed.
4. **More pairs on request** (``--until-decided``): after the rounds asked for, ``more(result)``
   (with ``result``'s rounds so far) returns how many pairs the case should have in all, or None to
   stop; the timers stay open between looks, so later pairs continue the same series.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..results.validation import MAX_ROUND_S, MIN_ROUND_S
from .loader import LoadedRevision
from .report import CaseResult

WARMUP_PAIRS = 2
_MAX_DEPTH = 6


class CaseError(Exception):
    """A revision failed on this case; the message names the revision and the step."""


def _guard(label: str, step: str, fn: Callable[[], object]):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a revision's code may raise anything: the case is an error
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CaseError(f"{label} {step}: {text[:400]}") from None


def output_difference(a, b, _depth: int = 0) -> float | None:
    """max |b - a| over every numeric element of two outputs of the same structure (tensors,
    arrays, numbers, and lists/tuples/dicts/dataclasses of them); ``inf`` when shapes, structure or
    non-numeric parts differ; None when nothing numeric was found."""
    if _depth > _MAX_DEPTH:
        return None
    if hasattr(a, "detach") and hasattr(b, "detach"):  # torch tensors
        if tuple(a.shape) != tuple(b.shape):
            return math.inf
        if a.numel() == 0:
            return 0.0
        x, y = a.detach().double().cpu(), b.detach().double().cpu()
        same_nan = (x.isnan() & y.isnan())
        d = (x - y).abs()
        d[same_nan] = 0.0
        d[x == y] = 0.0  # equal infinities
        return float(d.max()) if not d.isnan().any() else math.inf
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return math.inf
        if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
            return 0.0 if np.array_equal(x, y) else math.inf
        if x.size == 0:
            return 0.0
        d = np.abs(x.astype(np.float64) - y.astype(np.float64))
        d[(x == y) | (np.isnan(x.astype(np.float64)) & np.isnan(y.astype(np.float64)))] = 0.0
        return float(d.max()) if not np.isnan(d).any() else math.inf
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or a is None or b is None:
        return 0.0 if a == b else math.inf
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return 0.0
        return abs(float(b) - float(a)) if math.isfinite(a) and math.isfinite(b) else math.inf
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return math.inf
        return _worst(output_difference(a[k], b[k], _depth + 1) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return math.inf
        return _worst(output_difference(x, y, _depth + 1) for x, y in zip(a, b))
    if hasattr(a, "__dataclass_fields__") and type(a).__name__ == type(b).__name__:
        return _worst(output_difference(getattr(a, k), getattr(b, k, None), _depth + 1) for k in a.__dataclass_fields__)
    return 0.0 if a is b else None


def _worst(values) -> float | None:
    found = [v for v in values if v is not None]
    return max(found) if found else None


def _check(rev_label: str, base: LoadedRevision, case, out, truth, inputs) -> tuple[dict, list[str]]:
    results = _guard(rev_label, "output check (BASE's compare)", lambda: case.compare(out, truth, inputs))
    summary = base.registry.checks.summary(results, case.meta.extra.get("check_subset", ""))
    coverage = case.meta.extra.get("check_coverage")
    if "coverage" not in summary and isinstance(coverage, dict):  # a BASE whose summary predates coverage
        summary["coverage"] = coverage
    return summary, [c.message() for c in results if not c.ok]


def _sync(rev: LoadedRevision) -> None:
    rev.registry.harness.sync()


@dataclass(frozen=True)
class Side:
    """One revision's half of a case: the case as that revision's suites define it, and the loaded
    revision (its kernels and registry) that runs it."""

    case: object
    rev: LoadedRevision


@dataclass(frozen=True)
class Pairing:
    """How one case's pairs are drawn: the pairs of the first (or only) look, the seed of the
    per-pair order, the seed of the inputs, and ``more`` (see the module docstring; None: a fixed
    count)."""

    rounds: int
    seed: int
    input_seed: int = 0
    more: Callable[[CaseResult], int | None] | None = None


def run_pair(result: CaseResult, base: Side, cand: Side, pairing: Pairing) -> None:
    """Fill ``result`` for one case (status left for ``report.judge`` when timed). Raises nothing
    for a revision's failure: it becomes the case's ``error`` status with its message."""
    try:
        _run(result, base, cand, pairing)
    except CaseError as exc:
        result.status, result.note = "error", str(exc)


def _run(result: CaseResult, base_side: Side, cand_side: Side, pairing: Pairing) -> None:
    (base_case, base), (cand_case, cand) = (base_side.case, base_side.rev), (cand_side.case, cand_side.rev)
    input_seed = pairing.input_seed
    reg = cand.registry
    dev = reg.harness.device()
    inputs = _guard("CAND", "make_inputs", lambda: cand_case.make_inputs(dev, input_seed))
    checked = base_case.truth is not None and base_case.compare is not None
    truth = _guard("BASE", "fp64 reference", lambda: base_case.truth(inputs)) if checked else None
    bound_b = _guard("BASE", "bind", lambda: base_case.bind(inputs, base.kernels))
    out_b = _guard("BASE", "first call", bound_b.fn)
    _sync(base)
    bound_c = _guard("CAND", "bind", lambda: cand_case.bind(inputs, cand.kernels))
    out_c = _guard("CAND", "first call", bound_c.fn)
    _sync(cand)
    result.output_diff = output_difference(out_b, out_c)
    if not checked:
        result.outputs = "not checked"
        result.base_check = result.cand_check = {"ok": None, "rule": "not checked"}
    else:
        result.base_check, bad_b = _check("BASE", base, base_case, out_b, truth, inputs)
        try:
            result.cand_check, bad_c = _check("CAND", base, base_case, out_c, truth, inputs)
        except CaseError as exc:  # BASE's check cannot read CAND's output: its structure changed
            result.cand_check, bad_c = {"ok": False, "rule": "not comparable"}, [str(exc)]
        if bad_b and bad_c:
            result.outputs = "both wrong"
            raise CaseError("both revisions' outputs fail BASE's output check: BASE " + "; ".join(bad_b)[:300])
        if bad_c:
            result.outputs, result.status = "changed", "outputs-changed"
            result.note = "CAND's output fails BASE's check: " + "; ".join(bad_c)[:400]
            return
        if bad_b:
            result.outputs, result.status = "base wrong", "base-wrong"
            result.note = "BASE's output fails its own check, CAND's passes (a fix?): " + "; ".join(bad_b)[:300]
            return
        result.outputs = "identical" if result.output_diff == 0.0 else "within bounds"
    out_bytes_b, out_bytes_c = reg.timing.tensor_bytes(out_b), reg.timing.tensor_bytes(out_c)
    del out_b, out_c, truth
    prep_b = reg.Prepared(inputs, bound_b, {}, out_bytes_b, None)
    prep_c = reg.Prepared(inputs, bound_c, {}, out_bytes_c, None)
    _time(result, base_side, cand_side, (prep_b, prep_c), pairing)


def _timers(reg, base_case, cand_case, base, cand, prep_b, prep_c):
    # a provider that synchronises with the host cannot be a graph: then neither is (one plan for both)
    force = None if prep_b.bound.graph_ok and prep_c.bound.graph_ok else "events"
    tc = _guard("CAND", "timing plan", lambda: reg.timer_for(cand_case, prep_c, cand.kernels, force))
    mode = tc.plan.mode if tc.plan.mode in ("events", "graph") else None
    try:
        tb = _guard("BASE", "timing plan", lambda: reg.timer_for(base_case, prep_b, base.kernels, mode))
    except CaseError:
        tc.close()
        raise
    return tb, tc


def _round(timer) -> float:
    """One round's per-launch seconds: the device plan's own measure, or the process's CPU time
    around the work for a host-clock plan."""
    if timer.plan.mode != "host":
        return timer.measure()
    start = time.process_time()
    timer.work()
    return (time.process_time() - start) / timer.plan.launches


def _time(result: CaseResult, base_side: Side, cand_side: Side, prepared: tuple, pairing: Pairing) -> None:
    """Time the pairs of ``result``: ``prepared`` holds BASE's and CAND's bound calls on the same inputs."""
    (base_case, base), (cand_case, cand) = (base_side.case, base_side.rev), (cand_side.case, cand_side.rev)
    reg = cand.registry
    prep_b, prep_c = prepared
    rounds, seed, more = pairing.rounds, pairing.seed, pairing.more
    tb, tc = _timers(reg, base_case, cand_case, base, cand, prep_b, prep_c)
    try:
        if tb.plan.mode != tc.plan.mode:  # BASE fell back (e.g. no graph capture): time both alike
            tc.close()
            tc = _guard("CAND", "timing plan", lambda: reg.timer_for(cand_case, prep_c, cand.kernels, tb.plan.mode))
        if tb.plan.mode != tc.plan.mode:
            raise CaseError(f"BASE and CAND cannot be timed alike ({tb.plan.mode} vs {tc.plan.mode})")
        result.timing = {**tc.plan.info(), "launches_per_round_base": tb.plan.launches}
        if tc.plan.mode == "host":
            result.timing["timing"] = "host-cpu"
        rng = np.random.default_rng([seed, zlib.crc32(result.id.encode())])
        b_times, c_times, order = [], [], []
        skip, target = WARMUP_PAIRS, rounds
        while target is not None and target > len(b_times):
            first = rng.integers(0, 2, size=skip + target - len(b_times))
            for i, cand_first in enumerate(first):
                pair = {}
                for who in (("C", "B") if cand_first else ("B", "C")):
                    timer, label = (tc, "CAND") if who == "C" else (tb, "BASE")
                    pair[who] = _guard(label, "timed round", lambda t=timer: _round(t))
                if i >= skip:
                    b_times.append(float(pair["B"]))
                    c_times.append(float(pair["C"]))
                    order.append("C" if cand_first else "B")
            skip = 0
            bad = [t for t in b_times + c_times if not (math.isfinite(t) and MIN_ROUND_S <= t <= MAX_ROUND_S)]
            if bad:
                raise CaseError(f"a round of {bad[0]!r} s is outside [{MIN_ROUND_S:g}, {MAX_ROUND_S:g}] s: not a "
                                "measurement")
            result.base_rounds, result.cand_rounds, result.first = list(b_times), list(c_times), "".join(order)
            target = more(result) if more is not None else None
    finally:
        tb.close()
        tc.close()


__all__ = ["CaseError", "Pairing", "Side", "WARMUP_PAIRS", "output_difference", "run_pair"]
