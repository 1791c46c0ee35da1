"""``polytrace ab BASE_REV [CAND_REV]``: two git revisions' kernels timed in one process, rounds
interleaved, with a paired test, output agreement and the step-time line."""

from __future__ import annotations

import argparse

from ._args import any_int, deprecated, finite_float, positive_int_at_most, probability, threshold_fraction

# pairs per case: past this a run is a typo (every pair launches both revisions' kernels)
_rounds = positive_int_at_most(100_000, "rounds")
_max_pairs = positive_int_at_most(100_000, "max-pairs")


def _seconds(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive seconds, got {text!r}")
    return value


def register(sub) -> None:
    p = sub.add_parser(
        "ab", help="A/B two git revisions' kernels in one process, rounds interleaved (exit 0 pass, 1 regression, "
                   "2 refused, 3 inconclusive)",
        description="Check out BASE_REV (and CAND_REV; default: the working tree) into temporary git worktrees, "
                    "import both revisions' kernels/ and suites/ side by side, and time every selected case of our "
                    "providers with BASE and CAND rounds interleaved in pairs (order drawn per pair) on the same "
                    "inputs. A case regresses when a Wilcoxon signed-rank test on the per-pair log ratios gives "
                    "p < alpha AND the median pair ratio is slower than the threshold, and is unchanged when the "
                    "change's 1 - alpha interval lies within +-threshold; otherwise it is inconclusive, with the "
                    "pairs that would decide it. Aggregates per kernel, mode and provider as in `polytrace gate`; "
                    "both outputs are checked against BASE's fp64 reference. --until-decided adds pairs look by "
                    "look (alpha split over the planned looks) until every case is decided. Exit 0 pass, 1 a "
                    "regression or changed outputs, 2 refused or could not compare, 3 inconclusive. Needs a CUDA "
                    "GPU (--allow-cpu runs the CPU interpreter: a code-path check, not performance).")
    p.add_argument("base", metavar="BASE_REV", help="the revision to compare against (branch, tag or commit, "
                                                    "e.g. origin/main)")
    p.add_argument("cand", metavar="CAND_REV", nargs="?", default=None,
                   help="the candidate revision (default: the working tree, uncommitted changes included; naming "
                        "HEAD with uncommitted changes under kernels/, suites/ or results/tuning/ is refused)")
    p.add_argument("--suite", action="append", dest="suites", metavar="S", default=None,
                   help="time this suite (repeatable; default: every suite of CAND but 'workload', whose cases "
                        "time the running polytrace for both sides)")
    p.add_argument("-k", dest="keyword", metavar="EXPR", default=None,
                   help="select case ids (family/kernel/provider/mode/shape) as pytest -k does: words (substrings) "
                        "with and/or/not, parentheses")
    p.add_argument("--rounds", type=_rounds, default=None,
                   help="interleaved pairs per case (default 30 on a GPU; at least the signed-rank test's minimum "
                        "for --alpha: 10 at 0.002)")
    p.add_argument("--until-decided", action="store_true",
                   help="add pairs per case look by look (13, 26, 52, ... pairs at alpha 0.002) until it is decided "
                        "(regression, improvement or unchanged); each look is judged at alpha / (planned looks), so "
                        "the false-alarm rate stays at alpha")
    p.add_argument("--max-pairs", type=_max_pairs, default=None,
                   help="with --until-decided: the last look's pairs per case (default 256)")
    p.add_argument("--budget-s", type=_seconds, default=None, metavar="S",
                   help="with --until-decided: seconds of timing in all; a case takes a further look only when it "
                        "fits its share of what is left (first looks always run)")
    p.add_argument("--threshold", type=threshold_fraction, default=0.05,
                   help="median slowdown that counts: 5%% or 0.05 (default 5%%); a bare number above 1 is refused")
    p.add_argument("--alpha", type=probability, default=0.002,
                   help="significance level of the per-case test and the aggregates' intervals (default 0.002)")
    p.add_argument("--seed", type=any_int, default=0, help="seed of the per-pair run order (default 0)")
    p.add_argument("--repo", default=None, help="the git repository (default: the one holding the current folder)")
    deprecated(p, "--force", use="--allow-cpu", dest="allow_cpu", kind="store_true")
    p.add_argument("--allow-cpu", action="store_true",
                   help="run without a CUDA GPU, in the Triton interpreter at the suites' tiny CPU shapes "
                        "(a code-path check; its timings are not performance)")
    p.add_argument("-o", "--out", metavar="DIR", default=None,
                   help="also write ab.md, ab.txt, ab.json (every pair) and base.json / cand.json (each side's "
                        "rounds as result files) into DIR")
    p.add_argument("--all", action="store_true", help="text output lists unchanged cases too")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument("--markdown", action="store_true", help="print Markdown for a pull-request comment")
    p.set_defaults(func=_ab)


def _ab(args) -> int:
    from ..measure.ab import format_markdown, format_text, run_ab, stderr_progress
    from ..measure.ab.runner import CaseSource, PairPlan, Rule

    report = run_ab(args.base, args.cand, cases=CaseSource(args.repo, args.suites, args.keyword),
                    rule=Rule(args.threshold, args.alpha),
                    pairs=PairPlan(args.rounds, args.seed, args.until_decided, args.max_pairs, args.budget_s),
                    force=args.allow_cpu, out_dir=args.out,
                    progress=None if args.quiet else stderr_progress)  # one line per case, in logs too
    if args.json:
        from ._io import print_json

        print_json(report.to_dict())
    elif args.markdown:
        print(format_markdown(report))
    else:
        print(format_text(report, show_all=args.all))
    return report.exit_code
