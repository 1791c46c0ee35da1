"""``polytrace bench``: the suites sharded over a Ray cluster (or run serially here), resumable;
``polytrace bench --merge DIR`` re-runs the merge alone."""

from __future__ import annotations

import sys

from ..errors import PolytraceError
from ._args import deprecated, finite_float, nonneg_int, positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="run the suites in shards, serially or over Ray (--ray); resumable; one merged "
                      "pytest-benchmark file per suite and GPU model",
        description="Collect the suites' cases, run them in shards (each a pytest --benchmark-json run on a "
                    "worker holding one GPU), write every shard to OUT/shards/ as soon as it finishes, and merge "
                    "into OUT/<gpu-slug>/<suite>.json. Rerunning into the same OUT runs only the cases not "
                    "finished yet.")
    p.add_argument("--suite", action="append", dest="suites", metavar="S", default=None,
                   help="run this suite (suites/test_<S>.py; repeatable); default: every suite")
    deprecated(p, "--suites", use="--suite S (repeatable)", dest="suites", kind="extend", metavar="S")
    p.add_argument("-k", dest="k", metavar="EXPR", default=None, help="pytest -k expression selecting cases")
    p.add_argument("--ray", metavar="auto|local|ADDRESS", default=None,
                   help="run shards as Ray tasks: 'local' starts Ray here, 'auto' joins this machine's cluster, "
                        "or the head's HOST:PORT (of `ray start --head`); default: serially in this process")
    p.add_argument("-o", "--out", metavar="DIR", default=None,
                   help="run folder: shards/ (one record per shard) and <gpu-slug>/<suite>.json (merged)")
    p.add_argument("--merge", metavar="DIR", default=None,
                   help="only merge the shard records already in DIR (after Ctrl-C, or to re-merge)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="workers at once, per GPU model with --each-gpu-type (default: every GPU of the cluster; with "
                        "--allow-cpu on a cluster without GPUs, every CPU)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="without a GPU (here, or on a cluster without GPUs: one worker per CPU) run the suites in the "
                        "Triton interpreter (code-path check; timings are not performance); required there")
    p.add_argument("--budget-s", type=finite_float, default=None,
                   help="time budget for the whole run in seconds: no shard starts after it, and cases it "
                        "cut are left pending for a rerun")
    p.add_argument("--max-retries", type=nonneg_int, default=3,
                   help="times Ray reruns a shard whose worker was lost (default 3)")
    p.add_argument("--shard-size", type=positive_int, default=None,
                   help="at most this many cases per shard (default 64; shards are a multiple of the workers)")
    p.add_argument("--balance-from", metavar="DIR", default=None,
                   help="balance the shards by the case times an earlier run folder recorded (longest first onto "
                        "the least-loaded shard); default: by the suites' cost hints, round robin without them")
    p.add_argument("--suites-dir", metavar="DIR", default=None,
                   help="folder of test_<suite>.py files (default: the checkout's suites/)")
    p.add_argument("--each-gpu-type", action="store_true",
                   help="with --ray: run every case once on each GPU model of the cluster (one complete file per "
                        "model); default: each case once, on whichever GPU is free")
    p.add_argument("--ship-code", action="store_true",
                   help="with --ray: upload this checkout to the workers (Ray runtime_env working_dir) instead "
                        "of expecting it at the same path on every node")
    p.add_argument("--pytest-arg", action="append", default=[], metavar="ARG",
                   help="pass ARG to every shard's pytest (repeatable), e.g. --pytest-arg=--benchmark-disable-gc")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=_bench)


def _need_a_gpu_here() -> None:
    """A serial run without CUDA times the Triton interpreter: refused without --allow-cpu, as
    `tune` refuses (with --ray the cluster check says the same of its nodes)."""
    import torch

    if not torch.cuda.is_available():
        raise PolytraceError("bench: no CUDA GPU here: the suites would time the Triton interpreter on the CPU (a "
                             "code-path check, not performance); pass --allow-cpu to run them so")


def _bench(args) -> int:
    if args.merge:
        if args.out or args.ray or args.suites or args.k:
            raise PolytraceError("--merge DIR: merges what is in DIR; give no -o, --ray, --suite or -k with it")
        from ..measure.bench import merge_dir

        for m in merge_dir(args.merge):
            print(m.line())
        return 0
    if not args.out:
        raise PolytraceError("-o DIR: required (the run folder; rerun into the same folder to resume)")
    if not args.ray and not args.allow_cpu:
        _need_a_gpu_here()
    from ..measure.bench import run_bench
    from ..measure.bench.cluster import ClusterSpec
    from ..measure.bench.ledger import MAX_SHARD_CASES
    from ..measure.bench.run import BenchCases, ShardPlan

    def say(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    report = run_bench(args.out, cases=BenchCases(args.suites, args.k, args.suites_dir, args.pytest_arg),
                       cluster=ClusterSpec(args.ray, args.workers, args.allow_cpu, args.max_retries, args.ship_code),
                       shards=ShardPlan(args.shard_size or MAX_SHARD_CASES, args.each_gpu_type, args.balance_from),
                       budget_s=args.budget_s, on_event=say)
    for line in report.problems:
        print(f"polytrace: error: {line}", file=sys.stderr)
    print(report.summary())
    if report.interrupted:
        print("polytrace: interrupted", file=sys.stderr)
    return report.exit_code
