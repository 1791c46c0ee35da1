"""The suites' explicit case registry: every benchmark is a ``BenchCase`` a suite declares, and
the pytest tests are generated from it.

A case is usable outside pytest (``polytrace ab`` times two revisions' kernels side by side on
the same inputs):

- ``make_inputs(device, seed)``: deterministic input construction, apart from the call;
- ``bind(inputs, kernels)``: the provider's call on those inputs, a ``Bound`` whose ``fn()``
  launches once and returns the outputs. For our own providers ``kernels`` is the kernels package
  to call (default: the module ``polytrace_kernels``; another revision's copy imported under
  another name works the same), and nothing in ``suites/`` binds our kernel functions at import;
- ``truth(inputs)``: the fp64 reference from the same (rounded) inputs, on a deterministic subset
  of rows where the whole would not fit (``checks.py``);
- ``compare(outputs, truth, inputs)``: the output checks (``polytrace_kernels.tolerance``, the
  kernel tests' bounds), one ``Check`` per output.

``SUITES`` maps a suite name to its case modules (``suites/<module>.py``, each with a ``cases()``
function); ``suite_cases(name)`` lists its cases; ``make_test`` turns some of them into a pytest
test (ids stable across runs); ``run_case`` is the test body; ``measure`` the same without pytest.
To interleave two revisions: ``prepare(case, kernels=A, inputs=x)`` and ``prepare(case,
kernels=B, inputs=x)`` on one ``x = case.make_inputs(device, 0)``, then ``timer_for`` each and
alternate their ``measure()`` calls.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from . import checks, harness, timing
from .harness import Case, Provider

# suite name (suites/test_<name>.py) -> its case modules inside suites/ (a new kernel family: one line,
# docs/adding-a-kernel-family.md)
SUITES = {
    "logprob": ("logprob_cases",),
    "attention": ("attention_cases", "decode_cases"),
    "packing": ("packing_cases",),
    "gemm": ("gemm_cases",),
    "workload": ("workload_cases",),
}
DEFAULT_KERNELS = "polytrace_kernels"


@dataclass
class Bound:
    """A provider bound to one input set: ``fn()`` launches once and returns the outputs."""

    fn: Callable[[], object]
    extra: dict = field(default_factory=dict)  # goes into extra_info (e.g. plan build time)
    graph_ok: bool = True  # False: the call synchronises with the host (no CUDA graph possible)


@dataclass
class BenchCase:
    suite: str
    meta: Case  # what the benchmark measures: family, kernel, provider, mode, shape, FLOPs, bytes, ...
    provider: Provider
    make_inputs: Callable[[object, int], object]
    bind: Callable[[object, object], Bound]
    truth: Callable[[object], object] | None = None
    compare: Callable[[object, object, object], list] | None = None
    label: str = ""  # the pytest id
    host: bool = False  # host work (planner, sampler): timed with the host clock
    rotate_inputs: bool = True  # graph mode may build more input sets to keep the L2 cold
    rounds: int | None = None
    finish: Callable[[dict], None] | None = None  # adds derived figures to extra_info after the timing
    slow_setup: bool = False  # binding compiles for the shape (torch.compile, flex): run after the others

    @property
    def truth_key(self) -> tuple:
        """Cases with the same key share their fp64 reference (same shape, mode and outputs)."""
        m = self.meta
        return (m.family, m.kernel, m.mode, m.shape_id, tuple(m.extra.get("computes") or ()))

    @property
    def order(self) -> tuple:
        """Run order inside a suite, so a time budget cuts the least needed cases: our providers
        first, then baselines, then peers, compiled providers last."""
        rank = {"ours": 0, "": 0, "baseline": 1}.get(self.meta.kind, 2)
        return (self.slow_setup, rank)

    def cost_hint(self) -> float:
        """Rough relative run time of the case on this device, for ``polytrace bench`` to deal cases
        into balanced shards before any has run (``--balance-from`` uses measured times instead). In
        the interpreter our Triton kernels take seconds while torch runs natively in milliseconds
        (measured on the CPU suites: 0.7-2.9 s against 0.003-0.02 s); on a GPU every case costs
        about its rounds, a compiling provider about 3x that. A backward pass counts twice. Provider
        availability is not asked here: finding a peer importable can import it (verl: seconds), and
        collection must stay cheap."""
        backward = 2.0 if "bwd" in self.meta.mode else 1.0
        if not harness.on_gpu():
            return backward * (1.0 if self.meta.kind in ("ours", "") else 0.05)
        return backward * (3.0 if self.slow_setup else 1.0)

    @property
    def id(self) -> str:
        return harness.benchmark_id(self.meta)

    @property
    def test_id(self) -> str:
        return self.label or f"{self.meta.provider}-{self.meta.mode}-{self.meta.shape_id}"


def kernels_module(kernels=None):
    """The kernels package to call: a module, an importable name, or None (``polytrace_kernels``)."""
    if kernels is None:
        kernels = DEFAULT_KERNELS
    return importlib.import_module(kernels) if isinstance(kernels, str) else kernels


def _kernels_for(case: BenchCase, kernels):
    """The kernels package ``case`` binds: ``kernels`` for our providers, the default one for
    baselines and peers (only our kernels differ between two revisions)."""
    return kernels_module(kernels if case.meta.kind == "ours" else None)


def family_module(kernels, family: str, sub: str = ""):
    """``<kernels>.<family>`` (or ``.<family>.<sub>``) of the given kernels package."""
    base = kernels_module(kernels).__name__
    return importlib.import_module(f"{base}.{family}" + (f".{sub}" if sub else ""))


def suite_cases(suite: str) -> list[BenchCase]:
    """The cases of one suite, in a fixed order."""
    if suite not in SUITES:
        raise KeyError(f"unknown suite {suite!r}; suites: {', '.join(SUITES)}")
    out: list[BenchCase] = []
    for name in SUITES[suite]:
        # a name: suites/<name>.py; a module: a family's cases kept elsewhere (the toy-family test's)
        module = name if isinstance(name, types.ModuleType) else importlib.import_module(f".{name}", __package__)
        out.extend(module.cases())
    return out


# ---------------------------------------------------------------------------------- running


@dataclass
class Prepared:
    inputs: object
    bound: Bound
    check: dict
    output_bytes: int
    peak_mem: int | None


class OutputCheckFailed(AssertionError):
    pass


def prepare(case: BenchCase, kernels=None, seed: int = 0, inputs=None) -> Prepared:
    """Build the inputs (or take ``inputs``: two revisions timed on the very same tensors), bind
    the provider, call it once and check its output against the fp64 reference (outside any
    timing). A wrong result raises ``OutputCheckFailed`` naming the provider and the error: it is
    never timed."""
    dev = harness.device()
    if inputs is None:
        inputs = case.make_inputs(dev, seed)
    # the truth first: a provider may write into its inputs (liger puts the gradient in the logits)
    checked = case.truth is not None and case.compare is not None
    truth = _cached_truth(case, inputs, seed) if checked else None
    bound = case.bind(inputs, _kernels_for(case, kernels))
    out = bound.fn()
    harness.sync()
    if not checked:
        raise OutputCheckFailed(f"{case.id}: no reference registered: every case checks every output")
    coverage = case.meta.extra.get("check_coverage")
    if not isinstance(coverage, dict) or not coverage:
        raise OutputCheckFailed(f"{case.id}: declares no check coverage (meta.extra['check_coverage'])")
    check = _checked(case, out, truth, inputs, "wrong output, not timed")
    out_bytes = timing.tensor_bytes(out)
    del out
    return Prepared(inputs, bound, check, out_bytes, harness.peak_memory(bound.fn))


def _checked(case: BenchCase, out, truth, inputs, failure: str) -> dict:
    """``checks.summary`` of ``case.compare``; ``OutputCheckFailed`` when an output fails its rule
    (a peer's "16-bit-only" output is reported, not failed)."""
    results = case.compare(out, truth, inputs)
    try:
        check = checks.summary(results, case.meta.extra.get("check_subset", ""), case.meta.extra.get("check_coverage"))
    except ValueError as exc:
        raise OutputCheckFailed(f"{case.meta.provider}: {exc}") from None
    failed = [c for c in results if checks.verdict_of(c) == "fail"]
    if failed:
        raise OutputCheckFailed(f"{case.meta.provider}: {failure}: " + "; ".join(c.message() for c in failed))
    return check


def recheck(case: BenchCase, prepared: Prepared, timer: timing.Timer, copies: list, seed: int = 0) -> dict:
    """Check the output of the last timed launch again, against the truth of the inputs it ran on
    (input copy ``timer.last_copy``: a provider that caches a result across calls, or defers work
    past the end event, fails here). ``OutputCheckFailed`` when it differs from its truth."""
    out = timer.last_output()
    if out is None:
        raise OutputCheckFailed(f"{case.meta.provider}: the last timed launch returned no output to check")
    if prepared.bound.extra.get("inplace_grad_in_forward"):
        return {"ok": None, "skipped": "the provider writes into its inputs during the timed rounds; "
                "its first output was checked"}
    harness.sync()
    if timer.last_copy == 0:
        inputs, truth = prepared.inputs, _cached_truth(case, prepared.inputs, seed)
    else:
        inputs = copies[timer.last_copy - 1]
        truth = case.truth(inputs)
    check = _checked(case, out, truth, inputs, "the output of the last timed launch is wrong (it passed before "
                     "the timing: cached or deferred work?)")
    return {"ok": check["ok"], "verdict": check["verdict"], "input_copy": timer.last_copy,
            "max_abs_err": check.get("max_abs_err"), "bound": check.get("bound"), "output": check.get("output")}


_TRUTHS: dict[tuple, object] = {}
TRUTH_CACHE_BYTES = 4 << 30  # fp64 references kept for the next provider of the same shape


def _cached_truth(case: BenchCase, inputs, seed: int):
    """The fp64 reference, computed once per (shape, mode, outputs, seed) for every provider of the
    shape (inputs are deterministic, so it is the same)."""
    key = (*case.truth_key, seed)
    if key not in _TRUTHS:
        truth = case.truth(inputs)
        while _TRUTHS and sum(timing.tensor_bytes(t) for t in _TRUTHS.values()) + timing.tensor_bytes(truth) \
                > TRUTH_CACHE_BYTES:
            _TRUTHS.pop(next(iter(_TRUTHS)))
        _TRUTHS[key] = truth
    return _TRUTHS[key]


def timer_for(case: BenchCase, prepared: Prepared, kernels=None, force: str | None = None) -> timing.Timer:
    """How ``prepared`` is timed (events, or a CUDA graph over cold input copies); each
    ``timer.measure()`` is one round's per-launch device seconds, so two revisions' timers can
    be interleaved round by round. ``timer.close()`` frees the graph. ``timer.copies`` holds the
    input copies (copy i + 1 at index i) for ``recheck``."""
    copies: list = []

    def more_bound(k: int) -> list[Callable[[], object]]:
        dev = harness.device()
        mod = _kernels_for(case, kernels)
        fns = []
        for i in range(k):
            inputs = case.make_inputs(dev, 1000 + i)
            copies.append(inputs)
            fns.append(case.bind(inputs, mod).fn)
        return fns

    timer = timing.plan_timer(prepared.bound.fn, b=timing.backend(host=case.host), graph_ok=prepared.bound.graph_ok,
                              input_bytes=timing.tensor_bytes(prepared.inputs), output_bytes=prepared.output_bytes,
                              more_bound=more_bound if case.rotate_inputs else None, force=force)
    timer.copies = copies
    return timer


def run_case(benchmark, case: BenchCase, kernels=None) -> None:
    """The body of every generated test: skip an unavailable provider (saying why), check the
    output once, time the rounds, record everything in ``extra_info``."""
    import pytest

    harness.skip_unavailable(case.provider)
    try:
        prepared = prepare(case, kernels)
    except OutputCheckFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    cooled = harness.cool_down(case.meta.provider, host=case.host)
    timer = timer_for(case, prepared, kernels)
    timer.sampler = None if case.host else harness.clock_sampler()
    try:
        harness.time_rounds(benchmark, timer, case.meta, rounds=case.rounds, host=case.host)
        try:
            again = recheck(case, prepared, timer, getattr(timer, "copies", []))
        except OutputCheckFailed as exc:
            pytest.fail(str(exc), pytrace=False)
    finally:
        timer.close()
    meta = case.meta
    extra = {**prepared.bound.extra, **harness.window_info(timer)}
    if cooled:
        extra["cooldown_s"] = cooled
    meta = replace(meta, extra={**meta.extra, **extra})
    check = {**prepared.check, "after_timing": again}
    try:
        harness.record(benchmark, meta, prepared.peak_mem, timer.plan, check, samples=timer.samples)
    except harness.BelowRoofline as exc:
        pytest.fail(str(exc), pytrace=False)
    if case.finish is not None:
        case.finish(benchmark.extra_info)


def make_test(cases: list[BenchCase], name: str):
    """A pytest test function named ``name`` running ``cases`` (one parametrised case each),
    timed with the device clock."""
    import pytest

    def test(benchmark, case):
        run_case(benchmark, case)

    test.__name__ = test.__qualname__ = name
    ordered = sorted(cases, key=lambda c: c.order)  # stable: declaration order within a rank
    params = [pytest.param(c, id=c.test_id, marks=pytest.mark.polytrace_cost(c.cost_hint())) for c in ordered]
    test = pytest.mark.parametrize("case", params)(test)
    return pytest.mark.benchmark(timer=timing.device_clock)(test)


@dataclass
class Measurement:
    """A case timed outside pytest: per-launch device seconds of each round, and how."""

    id: str
    rounds_s: list[float]
    plan: timing.Plan
    check: dict


def measure(case: BenchCase, kernels=None, *, rounds: int | None = None, seed: int = 0,
            force: str | None = None) -> Measurement:
    """Time one case without pytest-benchmark (same inputs, check and timing as ``run_case``)."""
    prepared = prepare(case, kernels, seed)
    timer = timer_for(case, prepared, kernels, force)
    try:
        n = rounds or harness.rounds_for(timer.plan.estimate_s, host=case.host)[0]
        times = [timer.measure() for _ in range(n)]
        again = recheck(case, prepared, timer, getattr(timer, "copies", []), seed)
    finally:
        timer.close()
    return Measurement(case.id, times, timer.plan, {**prepared.check, "after_timing": again})
