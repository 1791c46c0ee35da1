#!/usr/bin/env python
"""Plant known kernel bugs one at a time and check that the CPU kernel tests catch each one.

Each mutation replaces one exact snippet of one file under ``kernels/`` in a temporary copy of the
repository (never the working tree), then runs that family's kernel tests there with ``-x -q``
(PYTHONPATH pointing at the copy, plus a ``.shim/polytrace_kernels`` link to the copy's kernels,
as in a worktree). A mutation is *killed* when the tests fail, *survived* when they pass. A snippet
that no longer occurs exactly once is *stale* (the kernel changed: update the list). Exit status:
0 all killed, 1 a mutation survived, 2 stale mutations or the unmutated copy failing its tests.

Not part of CI: each mutation costs a pytest run in the Triton interpreter (seconds to a minute on
two cores). Run it before merging a kernel change::

    python scripts/mutation_check.py                 # every mutation
    python scripts/mutation_check.py --list          # the list
    python scripts/mutation_check.py --only pack-row-mask --only decode-lse-bias
    python scripts/mutation_check.py --jobs 2        # two at a time

The bugs (``scripts/kernel_mutations/``, one module per family) are the kinds numerical and
indexing reviews find: mask comparisons off by one, scale constants off by 2e-4..3e-4 or 1%, biases of 2e-4..3e-4 in a
log-sum-exp or log-prob, dropped terms and dropped scalings, split-combine weights off by 1%, rows
written by two programs; and from a second list written without sight of the first, launch grids
that floor, a view read with a contiguous tensor's strides, accumulators and partials kept in 16
bits, split and tile boundaries, GQA head mapping, the planner's bin packing; a third and a fourth
list aimed at what the earlier ones covered thinly (``scripts/kernel_mutations/__init__.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernel_mutations import MUTATIONS, Mutation  # beside this script (its folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
# what the kernel tests need: they import only polytrace_kernels, and the static-report test its
# scripts and committed reports
COPIED = ("kernels", "tests", "pyproject.toml", "scripts", "results/static")

FP = "tests/kernels/test_kernel_footprint.py::"
# Footprint tests first: they watch every store, so a bug that writes out of bounds fails there
# instead of corrupting memory in a value test (a crash still counts as killed, but says less).
FAMILY_TESTS = {
    "packing": [FP + "test_pack_and_unpack_programs_write_their_own_rows",
                FP + "test_trusted_offsets_past_the_total_stay_inside_the_buffers",
                FP + "test_trusted_lengths_past_the_padded_width_stay_in_their_own_rows",
                "tests/kernels/test_packing_kernels.py",
                "tests/kernels/test_kernel_bad_input_packing.py", "tests/kernels/test_packing_kk.py",
                "tests/workload/test_packing_planner.py"],
    "logprob": [FP + "test_logits_programs_write_their_own_rows", FP + "test_fused_programs_write_their_own_tiles",
                "tests/kernels/test_logprob.py", "tests/kernels/test_logprob_configs.py",
                "tests/kernels/test_kernel_bad_input_logprob.py", "tests/kernels/test_logprob_features.py",
                "tests/kernels/test_kernel_int64_offsets.py", "tests/kernels/test_fused_lm_head_int64_rows.py",
                "tests/kernels/test_static_report.py"],
    "attention": [FP + "test_attention_programs_write_their_own_tiles", FP + "test_decode_programs_write_their_own_partials",
                  "tests/kernels/test_attention_fp32.py", "tests/kernels/test_attention.py", "tests/kernels/test_attention_configs.py",
                  "tests/kernels/test_attention_masked.py", "tests/kernels/test_kernel_bad_input_attention.py",
                  "tests/kernels/test_decode_single_launch.py::test_the_chooser_at_the_boundary_and_one_past",
                  "tests/kernels/test_decode_single_launch.py::test_rows_one_short_of_the_boundary_split_by_one_row",
                  "tests/kernels/test_static_report.py"],
}


def _copy_repo(dest: Path) -> None:
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    (dest / ".shim").mkdir()
    os.symlink("../kernels", dest / ".shim" / "polytrace_kernels")


def _run_tests(copy: Path, tests: list[str], timeout_s: int) -> tuple[int, str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), str(copy / ".shim")])
    env["TRITON_INTERPRET"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=copy, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return -1, "timeout", time.monotonic() - start
    output = proc.stdout + proc.stderr
    failures = [x for x in output.splitlines() if x.startswith(("FAILED", "ERROR"))]
    tail = output.strip().splitlines()
    return proc.returncode, failures[0] if failures else (tail[-1] if tail else ""), time.monotonic() - start


def check(mutation: Mutation, timeout_s: int) -> tuple[str, str, float]:
    with tempfile.TemporaryDirectory(prefix=f"mutation-{mutation.name}-") as tmp:
        copy = Path(tmp)
        _copy_repo(copy)
        target = copy / mutation.path
        text = target.read_text()
        if text.count(mutation.old) != 1:
            return "stale", f"snippet found {text.count(mutation.old)} times in {mutation.path}", 0.0
        target.write_text(text.replace(mutation.old, mutation.new))
        rc, first, elapsed = _run_tests(copy, FAMILY_TESTS[mutation.family], timeout_s)
    if rc == 0:
        return "survived", "every test passed", elapsed
    if rc == -1:
        return "killed", f"tests timed out after {timeout_s} s", elapsed
    return "killed", first, elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this mutation (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutations checked at a time (default 1)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per mutation's test run (default 900)")
    parser.add_argument("--no-baseline", action="store_true", help="skip running the unmutated copy's tests first")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:34s} {m.family:10s} {m.what}")
        return 0
    known = {m.name for m in MUTATIONS}
    unknown = [n for n in args.only if n not in known]
    if unknown:
        print(f"mutation_check: error: unknown mutation(s) {unknown}; see --list", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("mutation_check: error: --jobs must be >= 1", file=sys.stderr)
        return 2
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    start = time.monotonic()
    if not args.no_baseline:
        families = sorted({m.family for m in chosen})
        tests = sorted({t for f in families for t in FAMILY_TESTS[f]})
        with tempfile.TemporaryDirectory(prefix="mutation-baseline-") as tmp:
            _copy_repo(Path(tmp))
            rc, first, elapsed = _run_tests(Path(tmp), tests, args.timeout)
        if rc != 0:
            print(f"mutation_check: error: the unmutated kernel tests fail ({first}); fix them first", file=sys.stderr)
            return 2
        print(f"baseline   the unmutated tests pass ({elapsed:.0f} s)", flush=True)
    results = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {m.name: pool.submit(check, m, args.timeout) for m in chosen}
        for m in chosen:
            status, detail, elapsed = futures[m.name].result()
            results[m.name] = status
            print(f"{status:9s}  {m.name:34s} {elapsed:6.1f} s  {m.what}" + (f"  [{detail}]" if detail else ""),
                  flush=True)
    counts = {s: sum(1 for v in results.values() if v == s) for s in ("killed", "survived", "stale")}
    total = time.monotonic() - start
    print(f"{counts['killed']} killed, {counts['survived']} survived, {counts['stale']} stale of {len(chosen)} "
          f"mutations in {total / 60:.1f} min")
    if counts["stale"]:
        return 2
    return 1 if counts["survived"] else 0


if __name__ == "__main__":
    sys.exit(main())
