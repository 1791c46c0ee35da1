"""The Python half of ``scripts/device_check.sh`` (the GPU runbook): after the suites ran, write the
summary and the gate report, list the baseline's benchmarks the run lacks, and store the results.

``python -m suites.runbook summary OUT SUMMARY SLUG SUITE... [--results ROOT] [--allow-missing]``
prints one status line per finding and exits 1 when a benchmark of the baseline (of the suites
run) is missing from the run, unless ``--allow-missing``; ``... store OUT SUITE... [--set-baseline]
[--allow-cpu] [--force]`` files the run's JSON under ``results/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def run_files(out: Path, suites: list[str]) -> list[Path]:
    return [out / f"{s}.json" for s in suites if (out / f"{s}.json").is_file()]


def missing_benchmarks(baseline, results: list, suites: list[str]) -> list[str]:
    """Ids of the baseline's benchmarks of ``suites`` that none of ``results`` holds."""
    have = {b.id for r in results for b in r.benchmarks}
    return sorted(b.id for b in baseline.benchmarks if b.suite in suites and b.id not in have)


def environment_line(result) -> str:
    env = result.machine.get("environment") or {}
    if env.get("throttled") is None:
        why = env.get("note") or (env.get("start") or {}).get("nvml") or "no environment record in the file"
        return f"{Path(result.path).name}: environment unknown ({why})"
    clock = env.get("sm_clock") or {}
    text = (f"{Path(result.path).name}: SM clock median {clock.get('median_mhz', '?')} of max "
            f"{clock.get('max_mhz', '?')} MHz over {clock.get('samples', 0)} benchmarks")
    if env.get("throttled"):
        return text + "; THROTTLED: " + "; ".join(env.get("reasons", []))
    return text + "; not throttled"


def trust_line(result) -> str:
    """Every case checked (and how much of its outputs), none below its roofline (the reader refuses
    those), throttled benchmarks, and the cases off their prediction by more than 2x."""
    benches = result.benchmarks
    checks = [b.extra.get("check") for b in benches if isinstance(b.extra.get("check"), dict)]
    cover = [c["coverage_min"] for c in checks if isinstance(c.get("coverage_min"), (int, float))]
    sixteen = sum(1 for c in checks if c.get("verdict") == "16-bit-only")
    throttled = [b.id for b in benches if b.extra.get("throttled") is True]
    flagged = [f"{b.id} ({b.extra['prediction_flag']})" for b in benches if b.extra.get("prediction_flag")]
    text = (f"{Path(result.path).name}: {len(checks)} of {len(benches)} benchmarks checked"
            + (f" (smallest coverage {min(cover):.1%})" if cover else "")
            + (f", {sixteen} meeting only a 16-bit bound" if sixteen else "")
            + "; none below its roofline; "
            + (f"{len(throttled)} throttled (e.g. {throttled[0]})" if throttled else "none throttled")
            + f"; {len(flagged)} off their prediction by more than 2x")
    return text + ("" if not flagged else ": " + "; ".join(flagged[:5]) + (" ..." if len(flagged) > 5 else ""))


def step_estimate(files: list[Path], slug: str) -> str:
    """The default workload's step priced from this run's timings: which families are measured."""
    try:
        from polytrace.stepmodel import estimate
        from polytrace.stepmodel.breakdown import kernel_table, source_lines

        est = estimate("dapo-math-32b", "qwen2.5-32b", slug, 32, steps=range(8), results=[str(f) for f in files])
        return ("step estimate priced from this run (dapo-math-32b / qwen2.5-32b / 32 GPUs, estimated):\n"
                + kernel_table(est["summary"]) + "\n" + "\n".join(source_lines(est["summary"])))
    except Exception as exc:  # noqa: BLE001 - e.g. a CPU dry run: CPU timings are not rates
        return f"step estimate from this run: not computed ({exc})"


def summary(out: Path, summary_path: Path, slug: str, suites: list[str], results_root: Path,
            allow_missing: bool = False) -> int:
    from polytrace.atomic_write import atomic_write_text
    from polytrace.measure.results import compare, format_markdown, format_show, load_result
    from polytrace.measure.results.schema import merge
    from polytrace.measure.results.store import baseline_path, format_brief

    brief, full, lines, code = [], [], [], 0
    results = []
    for f in run_files(out, suites):
        try:
            r = load_result(f)
        except Exception as exc:  # noqa: BLE001 - one unreadable file must not hide the others
            brief.append(f"{f.name}: cannot read: {exc}")
            code = 1
            continue
        results.append(r)
        brief.append(format_brief(r))
        full.append(format_show(r))
        lines.append(environment_line(r))
        unchecked = [b.id for b in r.benchmarks if not isinstance(b.extra.get("check"), dict)]
        if unchecked:
            lines.append(f"{f.name}: {len(unchecked)} benchmark(s) without an output check, e.g. {unchecked[0]}")
        lines.append(trust_line(r))
    base = baseline_path(results_root, slug)
    if results and base.is_file():
        baseline = load_result(base)
        missing = missing_benchmarks(baseline, results, suites)
        if missing:
            lines.append(f"MISSING: {len(missing)} benchmark(s) of the baseline are not in this run, e.g. "
                         + ", ".join(missing[:5]) + (" (allowed: --allow-missing)" if allow_missing else ""))
            code = code or (0 if allow_missing else 1)
        try:
            candidate = merge(results, name=str(out))
            report = compare(baseline, candidate)
            if report.exit_code != 2:  # the change's cost on the default workload, under the verdict as in gate
                from polytrace.stepmodel.impact import step_time_line

                report.impact.append(step_time_line(baseline, candidate)["line"])
            atomic_write_text(out / "gate.md", format_markdown(report) + "\n")
            lines.append(f"gate vs {base}: {report.verdict} (exit {report.exit_code}) -> gate.md")
        except Exception as exc:  # noqa: BLE001 - the gate's refusal or error is reported, not fatal here
            lines.append(f"gate vs {base}: could not run: {exc}")
    elif results:
        lines.append(f"gate: no baseline at {base} (set one with: polytrace results set-baseline {out}/*.json)")
    if results:
        brief.append(step_estimate(run_files(out, suites), slug))
    atomic_write_text(summary_path, "\n\n".join(brief) + "\n\n" + "\n".join(lines) + "\n\n# full tables\n\n"
                      + "\n\n".join(full) + "\n")
    for line in lines:
        print(line)
    return code


def store(out: Path, suites: list[str], results_root: Path, set_base: bool, allow_cpu: bool, force: bool) -> int:
    from polytrace.errors import PolytraceError
    from polytrace.measure.results import set_baseline, store_result

    files, code = run_files(out, suites), 0
    for f in files:
        try:
            print("stored", store_result(f, results_root, overwrite=True, allow_cpu=allow_cpu, force=force))
        except PolytraceError as exc:
            print("store failed:", exc)
            code = 1
    if set_base and files:
        try:
            print("baseline", set_baseline(files, results_root, allow_cpu=allow_cpu, force=force))
        except PolytraceError as exc:
            print("set-baseline failed:", exc)
            code = 1
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.runbook", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("summary", help="summary.txt, gate.md and the missing-benchmark check")
    p.add_argument("out", type=Path, help="the run's output folder ($OUT)")
    p.add_argument("summary", type=Path, help="summary file to write")
    p.add_argument("slug", help="GPU slug of the run (results/baselines/<slug>.json)")
    p.add_argument("suites", nargs="+", help="suites that ran")
    p.add_argument("--results", type=Path, default=Path("results"), help="results folder (default ./results)")
    p.add_argument("--allow-missing", action="store_true", help="baseline benchmarks missing from the run are "
                   "reported, not an error")
    p = sub.add_parser("store", help="store the run's JSON files under the results folder")
    p.add_argument("out", type=Path, help="the run's output folder ($OUT)")
    p.add_argument("suites", nargs="+", help="suites that ran")
    p.add_argument("--results", type=Path, default=Path("results"), help="results folder (default ./results)")
    p.add_argument("--set-baseline", action="store_true", help="also merge them into the GPU's baseline")
    p.add_argument("--allow-cpu", action="store_true", help="accept CPU-interpreter results (dry runs)")
    p.add_argument("--force", action="store_true", help="accept a run marked throttled")
    args = parser.parse_args(argv)
    if args.command == "summary":
        return summary(args.out, args.summary, args.slug, args.suites, args.results, args.allow_missing)
    return store(args.out, args.suites, args.results, args.set_baseline, args.allow_cpu, args.force)


if __name__ == "__main__":
    sys.exit(main())
