"""``run_ab``: two revisions' kernels timed in one process, case by case, rounds interleaved.

Order of work: check the arguments and the device (a CPU-interpreter run is refused without
``force``), resolve both revisions and refuse a dirty tree when CAND is HEAD, check them out
(``revisions``), import both (``loader``), match their suites' cases of our providers by benchmark
id (cases present in one revision only are listed, not compared), time each matched case
(``measure``), judge and aggregate (``report``), add the step-time line, write ``-o`` files.
With ``until_decided`` each case gets pairs look by look until it is decided (``sequential``:
the rule that keeps the false-alarm rate at alpha is stated there).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import PolytraceError
from ...wording import counted, first_few
from ..results.gate import GATED_KINDS
from ..results.select import keyword_matcher
from ..results.verdict import Rule
from . import loader, measure, paired, revisions, sequential
from .report import AbReport, CaseResult, aggregate, judge, result_json

GPU_ROUNDS = 30  # pairs per case on a GPU: the suites' 30 rounds, and p down to 2e-9 (alpha 0.002 needs 10)
# Suites whose cases time code `ab` does not load per revision: the profile sampler is polytrace
# itself (the running one), so both sides would run the same code. Timed only when named.
NOT_BY_DEFAULT = {"workload": "its cases time polytrace's profile sampler, which is the running polytrace for both "
                              "revisions (an A/A check, not a comparison)"}


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _device_info(cuda: bool) -> dict:
    import torch
    import triton

    from ...run.hardware import slug_for

    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    out = {"gpu_name": name, "gpu_slug": slug_for(name) if cuda else "cpu",
           "measured_on": "cuda" if cuda else "cpu-interpreter", "torch_version": torch.__version__,
           "triton_version": triton.__version__, "cuda_version": torch.version.cuda or ""}
    if not cuda:
        out["triton_interpret"] = "1"
    return out


@contextlib.contextmanager
def _interpreter(cuda: bool) -> Iterator[None]:
    """On a CPU (``force``): the Triton interpreter for the run (our kernels read the variable at
    launch, triton at decoration), restored afterwards."""
    if cuda:
        yield
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def _select(rev: loader.LoadedRevision, suites: list[str], match) -> tuple[dict, list[str]]:
    """{id: case} of our providers (the kinds the gate gates) in ``suites`` (those the revision
    has) matching ``-k``."""
    known = list(rev.registry.SUITES)
    out, absent = {}, []
    for suite in suites:
        if suite not in known:
            absent.append(suite)
            continue
        try:
            cases = rev.registry.suite_cases(suite)
        except Exception as exc:  # noqa: BLE001 - a revision's suite code may raise anything
            raise PolytraceError(f"{rev.label}: suite {suite!r} fails to list its cases: {type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:300]}") from None
        for case in cases:
            if case.meta.kind in GATED_KINDS and match(case.id):
                out[case.id] = case
    return out, absent


def _result(case) -> CaseResult:
    m = case.meta
    return CaseResult(id=case.id, suite=case.suite, family=m.family, kernel=m.kernel, provider=m.provider,
                      mode=m.mode, shape_id=m.shape_id, shape=dict(m.shape), profile=m.profile, seed=m.seed,
                      step=m.step, weight=m.weight, flops=float(m.flops or 0.0),
                      bytes_moved=float(m.bytes_moved or 0.0), roofline=m.roofline)


def check_rounds(rounds: int | None, alpha: float, cuda: bool) -> int:
    """The pairs per case: ``rounds`` or the default; fewer than the signed-rank test needs to
    reach p < alpha is refused, naming the minimum."""
    need = paired.pairs_needed(alpha)
    if rounds is None:
        return max(GPU_ROUNDS, need) if cuda else need
    if rounds < need:
        raise PolytraceError(f"--rounds {rounds}: a paired signed-rank test on {rounds} pairs cannot reach "
                             f"p < {alpha:g} (smallest p {paired.min_p_value(rounds):.3g}); use at least {need}")
    return rounds


@dataclass(frozen=True)
class CaseSource:
    """Which cases ``ab`` compares: the git repository (None: the one around the working
    directory), its suites (None: the default ones) and a ``-k`` expression over case ids."""

    repo: str | Path | None = None
    suites: list[str] | None = None
    keyword: str | None = None


@dataclass(frozen=True)
class PairPlan:
    """How many pairs each case gets: ``rounds`` (None: the default for the device) and the seed of
    the per-pair order, or, with ``until_decided``, looks up to ``max_pairs`` within ``budget_s``."""

    rounds: int | None = None
    seed: int = 0
    until_decided: bool = False
    max_pairs: int | None = None
    budget_s: float | None = None


def run_ab(base_rev: str, cand_rev: str | None = None, *, cases: CaseSource = CaseSource(), rule: Rule | None = None,
           pairs: PairPlan = PairPlan(), force: bool = False, out_dir: str | Path | None = None,
           progress: Callable[[str], None] | None = None) -> AbReport:
    """Time BASE against CAND (None: the working tree); see the package docstring for the rules
    (``rule``: the default 5% at alpha 0.002 when None)."""
    rule = rule or Rule()
    repo, suites, keyword = cases.repo, cases.suites, cases.keyword
    threshold, alpha = rule.threshold, rule.alpha
    rounds, seed = pairs.rounds, pairs.seed
    if not 0 < threshold < 10:
        raise PolytraceError(f"--threshold must be a fraction in (0, 10), got {threshold}")
    if not 0 < alpha < 1:
        raise PolytraceError(f"--alpha must be in (0, 1), got {alpha}")
    plan = _plan(pairs, alpha)
    match = keyword_matcher(keyword)
    out_path = _out_dir(out_dir)
    if rounds is not None:
        check_rounds(rounds, alpha, cuda=True)  # too few for the test: refused before anything else
    root = revisions.repo_root(repo)
    resolved = revisions.resolve_pair(root, base_rev, cand_rev)  # git only: bad revisions fail fast
    cuda = _cuda()
    if not cuda and not force:
        raise PolytraceError("no CUDA GPU: on this machine both revisions would run in the Triton interpreter, a smoke "
                             "test of the code path whose timings are not performance; --allow-cpu runs it anyway "
                             "(at the suites' tiny CPU shapes)")
    n_pairs = plan.looks[0] if plan else check_rounds(rounds, alpha, cuda)
    say = progress or (lambda _msg: None)
    with revisions.checked_out(root, base_rev, cand_rev, resolved) as (base_rev_, cand_rev_), _interpreter(cuda), \
            loader.loaded({"BASE": base_rev_.root, "CAND": cand_rev_.root}) as revs:
        base, cand = revs["BASE"], revs["CAND"]
        wanted = _suites(suites, cand, base)
        report = AbReport(base=_rev_dict(base_rev_), cand=_rev_dict(cand_rev_), device=_device_info(cuda),
                          threshold=threshold, alpha=alpha, rounds=plan.max_pairs if plan else n_pairs, seed=seed,
                          suites=wanted, keyword=keyword, sequential=plan.to_dict() if plan else None)
        base_cases, base_absent = _select(base, wanted, match)
        cand_cases, _ = _select(cand, wanted, match)
        for suite in base_absent:
            report.notes.append(f"suite {suite!r} is new in CAND: its cases are listed, not compared")
        report.only_base = sorted(set(base_cases) - set(cand_cases))
        report.only_cand = sorted(set(cand_cases) - set(base_cases))
        common = [i for i in cand_cases if i in base_cases]
        if not common:
            what = f" matching -k {keyword!r}" if keyword else ""
            raise PolytraceError(f"no case of our providers{what} in suite(s) {', '.join(wanted)} is present in both "
                                 f"revisions ({len(cand_cases)} in CAND, {len(base_cases)} in BASE)")
        if base_rev_.commit == cand_rev_.commit and not cand_rev_.short.endswith("-dirty"):
            report.notes.append("BASE and CAND are the same commit: an A/A run, every difference is noise")
        sequencer = sequential.Sequencer(plan, threshold, len(common), judge) if plan else None
        for k, case_id in enumerate(common, 1):
            result = _result(cand_cases[case_id])
            say(f"[{k}/{len(common)}] {case_id}")
            _definition_note(result, base_cases[case_id], report)
            measure.run_pair(result, measure.Side(base_cases[case_id], base), measure.Side(cand_cases[case_id], cand),
                             measure.Pairing(n_pairs, seed, more=sequencer.for_case(result) if sequencer else None))
            if result.base_rounds:
                judge(result, threshold, report.judged_alpha)
            if sequencer:
                sequencer.done()
                if result.status == "inconclusive" and result.id in plan.stops:
                    result.note = f"{plan.stops[result.id]}; {result.note}"
                if result.base_rounds:
                    say(f"    {result.status} after {result.pairs} pairs (looks at {result.looks})")
            report.cases.append(result)
    if plan:
        report.sequential = plan.to_dict()
    _finish(report, seed, cuda)
    if out_path is not None:
        write_outputs(report, out_path)
    return report


def _plan(pairs: PairPlan, alpha: float) -> sequential.Plan | None:
    rounds, max_pairs, budget_s = pairs.rounds, pairs.max_pairs, pairs.budget_s
    until_decided = pairs.until_decided
    if not until_decided:
        for flag, value in (("--max-pairs", max_pairs), ("--budget-s", budget_s)):
            if value is not None:
                raise PolytraceError(f"{flag} needs --until-decided (a fixed run times --rounds pairs per case)")
        return None
    if rounds is not None:
        raise PolytraceError("--rounds and --until-decided: a sequential run chooses its pairs per case; bound it "
                             "with --max-pairs N and --budget-s S")
    if budget_s is not None and not budget_s > 0:
        raise PolytraceError(f"--budget-s must be positive seconds, got {budget_s}")
    return sequential.plan_looks(alpha, max_pairs or sequential.DEFAULT_MAX_PAIRS, budget_s)


def _suites(asked: list[str] | None, cand: loader.LoadedRevision, base: loader.LoadedRevision) -> list[str]:
    known = list(cand.registry.SUITES)
    if asked:
        unknown = [s for s in asked if s not in known]
        if unknown:
            raise PolytraceError(f"--suite {unknown[0]!r}: no such suite in CAND; suites: {', '.join(known)}")
        return list(dict.fromkeys(asked))
    return [s for s in known if s not in NOT_BY_DEFAULT]


def _rev_dict(rev: revisions.Revision) -> dict:
    return {"spec": rev.spec, "commit": rev.commit, "short": rev.short, "kernel_hashes": rev.kernel_hashes()}


def _definition_note(result: CaseResult, base_case, report: AbReport) -> None:
    b = base_case.meta
    if (b.profile, b.seed, b.step) != (result.profile, result.seed, result.step) or b.weight != result.weight:
        report.notes.append(f"{result.id}: profile/seed/step/weight differ between the revisions' suites "
                            f"({b.profile}/{b.seed}/{b.step}/{b.weight} vs {result.profile}/{result.seed}/"
                            f"{result.step}/{result.weight}); CAND's are used")


def _finish(report: AbReport, seed: int, cuda: bool) -> None:
    if not cuda:
        report.warnings.append("CPU interpreter (--allow-cpu): these timings check the code path, they are not "
                               "performance")
    for c in report.of("error"):
        c.note = c.note or "failed"
    undecided = report.of("inconclusive")
    if undecided:
        how = "raise --max-pairs or --budget-s" if report.sequential else "rerun with more --rounds, or --until-decided"
        report.warnings.append(f"{counted(len(undecided), 'case')} inconclusive at alpha={report.judged_alpha:.3g}, "
                               f"threshold {report.threshold:.1%} ({how}): " + first_few(
                                   [f"{c.id}: {c.change:+.1%} after {c.pairs} pairs, ~{c.pairs_to_decide} would "
                                    "decide" for c in undecided]))
    errors = report.of("error")
    if errors:
        report.errors.append(f"{len(errors)} case(s) could not be compared: "
                             + first_few([f"{c.id}: {c.note}" for c in errors]))
    if report.only_base or report.only_cand:
        report.notes.append(f"the revisions' suites differ: {len(report.only_cand)} case(s) only in CAND, "
                            f"{len(report.only_base)} only in BASE (listed, not compared)")
    bh, ch = report.base["kernel_hashes"], report.cand["kernel_hashes"]
    changed = sorted(f for f in set(bh) | set(ch) if bh.get(f) != ch.get(f))
    report.notes.append("kernel source changed in: " + ", ".join(changed) if changed else
                        "no kernel source changed between the revisions")
    aggregate(report, seed)
    regressed = {c.family for c in report.of("regression")} | {a.family for a in report.aggregate_regressions}
    same = sorted(f for f in regressed if f in bh and bh.get(f) == ch.get(f))
    if same:
        report.warnings.append("regressions in families whose kernel source did not change (" + ", ".join(same)
                               + "): the suites' code changed, or noise; rerun before believing it")
    _step_time(report)


def _step_time(report: AbReport) -> None:
    """The step-time line under the verdict (``polytrace.stepmodel.impact``), from both sides'
    medians in result files of the suites' schema."""
    from ...stepmodel.impact import step_time_line
    from ..results.schema import parse_result

    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    try:
        sides = [parse_result(result_json(report, side, now), f"<ab {side}>") for side in ("base", "cand")]
    except PolytraceError as exc:
        report.impact.append(f"step time: not estimated ({exc})")
        return
    if not sides[0].benchmarks:
        report.impact.append("step time: not estimated (no case was timed)")
        return
    try:
        res = step_time_line(sides[0], sides[1])
    except PolytraceError as exc:  # never lose a finished run to the estimate
        res = {"line": f"step time: not estimated ({exc})", "step_change": None}
    report.impact.append(res["line"])
    report.step_time = {"line": res["line"], "step_change": res["step_change"]}


def _out_dir(out_dir) -> Path | None:
    if out_dir is None:
        return None
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise PolytraceError(f"-o {path}: exists and is not a folder")
    return path


def write_outputs(report: AbReport, folder: Path) -> list[Path]:
    """``ab.md``, ``ab.txt``, ``ab.json`` (the report with every pair) and ``base.json`` /
    ``cand.json`` (each side's rounds as result files), each written atomically."""
    from ...atomic_write import atomic_write_text
    from .render import format_markdown, format_text

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolytraceError(f"-o {folder}: cannot create the folder: {exc.strerror or exc}") from None
    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    files = {"ab.md": format_markdown(report), "ab.txt": format_text(report, show_all=True),
             "ab.json": json.dumps(report.to_dict(), indent=1, default=_json_default),
             "base.json": json.dumps(result_json(report, "base", now), indent=1, default=_json_default),
             "cand.json": json.dumps(result_json(report, "cand", now), indent=1, default=_json_default)}
    written = []
    for name, text in files.items():
        atomic_write_text(folder / name, text + "\n")
        written.append(folder / name)
    return written


def _json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def stderr_progress(msg: str) -> None:
    print(f"polytrace ab: {msg}", file=sys.stderr, flush=True)


__all__ = ["GPU_ROUNDS", "CaseSource", "PairPlan", "Rule", "check_rounds", "run_ab", "stderr_progress", "write_outputs"]
