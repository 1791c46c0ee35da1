#!/usr/bin/env bash
# polytrace GPU runbook: turn a GPU lease into checked kernels and result files, and fail loudly.
#
# On a machine with a CUDA GPU and the packages already installed (torch, triton, pytest,
# pytest-benchmark, scipy, tabulate, numpy; nvidia-ml-py for the environment record; no network,
# polytrace NOT pip-installed), from anywhere:
#
#   scripts/device_check.sh [--budget-s 210] [--tests-budget-s 120] [--suites "logprob attention gemm packing workload"]
#                           [--kernel-tests "tests/kernels/test_logprob.py ..."] [-k EXPR] [--skip-tests] [--allow-missing]
#                           [--commit SHA] [--store] [--set-baseline] [--force] [--allow-cpu]
#                           [--via-bench [--bench-dir DIR]] [--ab-check] [--skip-probe]
#
# 0. warms the Triton cache: compiles every kernel's default configs for this GPU in one process
#    (scripts/static_report.py --arch <this GPU>), so the tests and suites below do not pay 1-3 s a
#    compile inside their budgets, and records what the compiled code says (registers, spills,
#    CTAs per SM) in the log;
# 1. runs every kernel test file (tests/kernels/test_logprob.py, test_attention.py, test_packing_kernels.py,
#    test_kernel_bad_input_*.py, and test_kernel_launch.py / test_tolerance.py where present) on the
#    GPU, then the other `gpu`-marked tests, under their own cap (--tests-budget-s);
# 1b. probes the kernel decisions made from compiled code (scripts/device_probe.py, cap 90 s,
#    --skip-probe skips it): log-prob block size and its rate against a copy, fused LM head vs
#    torch.mm, attention tiles vs torch's varlen_attn, decode split counts; one status line each,
#    and the log-prob winner written as a tuned config the suites then use (POLYTRACE_TUNING_DIR);
# 2. runs every suite (suites/test_<name>.py) with pytest-benchmark, sharing the total time budget
#    (--budget-s, default 210 s) between them: each suite gets the time left divided by the suites
#    left, enforced in-process (POLYTRACE_BENCH_BUDGET_S: later benchmarks skip with a reason and the
#    JSON is still written) with a hard `timeout` behind it (SIGINT first, so pytest still writes
#    what it measured; SIGKILL 20 s later). -k EXPR selects benchmarks (pytest -k) in every suite;
#    --via-bench runs the same suites through `polytrace bench` instead (serially on this GPU, no
#    Ray needed; one budget for all suites; shards recorded in --bench-dir, default a scratch
#    folder, so a rerun with the same --bench-dir resumes) and copies the merged
#    <gpu-slug>/<suite>.json files to $OUT/<suite>.json: the same files, ids and schema;
# 3. writes under $OUT (default ./out), at most 8 plain files, no sub-folders:
#      <suite>.json        pytest-benchmark JSON with raw rounds (device times) and the environment record
#      device_check.log    everything the steps printed
#      summary.txt         the one-screen summary plus every suite's full table
#      gate.md             the regression gate against results/baselines/<gpu-slug>.json, when one exists
# 4. prints the one-screen summary.
#
# --ab-check (optional, off by default; about 2-3 more minutes): after the suites, runs
# tests/measure/test_ab_gpu.py, the GPU goal of `polytrace ab` (a planted ~5% kernel slowdown caught, no
# false alarm in 10 A/A runs; the measured changes go to the log), as its own status line.
#
# The defaults fit under 9 minutes of wall time on an H200 (at most 90 s of cache warm-up, 120 s of
# tests, 90 s of probe, 210 s of suites, start-up and summary), leaving a 15-minute device lease
# room for the machine's start and a partial rerun.
#
# --store / --set-baseline copy the JSON files into results/<gpu-slug>/<date>_<commit>_<suite>.json
# and merge them into results/baselines/<gpu-slug>.json in THIS tree (a throttled run is refused
# unless --force). On a leased machine whose tree does not come back, fetch $OUT instead and run the
# same step at home:
#   PYTHONPATH=. python3 -m polytrace results store OUT_DIR/*.json
#   PYTHONPATH=. python3 -m polytrace results set-baseline OUT_DIR/*.json      # when it is the new baseline
#
# Exit status: 0 when every test passed, every suite ran without error and every benchmark of the
# baseline (of the suites run) is in the run; 1 when a test failed, a suite errored (a wrong output,
# a provider that raised, a hard timeout), a baseline benchmark is missing (--allow-missing, or
# -k, relaxes the last) or a step raised (cache warm-up, probe, store, step estimate, gate: each is
# named on a "<step>: RAISED" status line); 3 when the machine cannot run the check (no GPU,
# missing package, bad option).

set -uo pipefail

BUDGET_S=210
TESTS_BUDGET_S=120
SUITES="logprob attention gemm packing workload"
KERNEL_TESTS="tests/kernels/test_logprob.py tests/kernels/test_attention.py tests/kernels/test_packing_kernels.py tests/kernels/test_kernel_bad_input_*.py tests/kernels/test_kernel_launch.py tests/kernels/test_tolerance.py"
# One representative micro-batch per profile keeps the attention suite inside a short lease;
# export POLYTRACE_ATTENTION_BATCHES=2 or more for a full run.
export POLYTRACE_ATTENTION_BATCHES="${POLYTRACE_ATTENTION_BATCHES:-1}"
SELECT=""
SKIP_TESTS=0
ALLOW_MISSING=0
STORE=0
SET_BASELINE=0
FORCE=0
ALLOW_CPU=0
AB_CHECK=0
AB_CHECK_CAP_S=300
PROBE=1
PROBE_CAP_S=90
COMMIT="${POLYTRACE_COMMIT:-}"
MAX_OUT_FILES=8
VIA_BENCH=0
BENCH_DIR=""

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --budget-s) BUDGET_S="${2:?--budget-s needs seconds}"; shift 2 ;;
        --tests-budget-s) TESTS_BUDGET_S="${2:?--tests-budget-s needs seconds}"; shift 2 ;;
        --suites) SUITES="${2:?--suites needs a list}"; shift 2 ;;
        --kernel-tests) KERNEL_TESTS="${2:?--kernel-tests needs a list of test files}"; shift 2 ;;
        -k) SELECT="${2:?-k needs a pytest expression}"; ALLOW_MISSING=1; shift 2 ;;
        --skip-tests) SKIP_TESTS=1; shift ;;
        --allow-missing) ALLOW_MISSING=1; shift ;;
        --commit) COMMIT="${2:?--commit needs a value}"; shift 2 ;;
        --store) STORE=1; shift ;;
        --set-baseline) STORE=1; SET_BASELINE=1; shift ;;
        --force) FORCE=1; shift ;;
        --allow-cpu) ALLOW_CPU=1; shift ;;
        --ab-check) AB_CHECK=1; shift ;;
        --skip-probe) PROBE=0; shift ;;
        --via-bench) VIA_BENCH=1; shift ;;
        --bench-dir) BENCH_DIR="${2:?--bench-dir needs a folder}"; VIA_BENCH=1; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "device_check.sh: unknown option $1 (see --help)" >&2; exit 3 ;;
    esac
done
for n in "$BUDGET_S" "$TESTS_BUDGET_S"; do
    case "$n" in ''|*[!0-9]*) echo "device_check.sh: budgets are whole seconds, got '$n'" >&2; exit 3 ;; esac
done
set -- $SUITES
if [ $(( $# + 3 )) -gt "$MAX_OUT_FILES" ]; then
    echo "device_check.sh: --suites: at most $(( MAX_OUT_FILES - 3 )) suites (one JSON each, plus log, summary and gate.md: $MAX_OUT_FILES files under \$OUT)" >&2
    exit 3
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 3
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT" || { echo "device_check.sh: cannot create OUT=$OUT" >&2; exit 3; }
OUT="$(cd "$OUT" && pwd)"
RESULTS="${POLYTRACE_RESULTS_DIR:-$ROOT/results}"
LOG="$OUT/device_check.log"
SUMMARY="$OUT/summary.txt"
: > "$LOG"
for s in $SUITES; do rm -f "$OUT/$s.json"; done
rm -f "$OUT/gate.md" "$SUMMARY"

PY="${PYTHON:-python3}"
# Not pip-installed: the kernels/ folder installs as `polytrace_kernels` (setup.py), so a link of
# that name in a scratch folder on PYTHONPATH stands in for the install.
IMPORT_SHIM="$(mktemp -d)"
trap 'rm -rf "$IMPORT_SHIM"' EXIT
ln -s "$ROOT/kernels" "$IMPORT_SHIM/polytrace_kernels"
export PYTHONPATH="$ROOT:$IMPORT_SHIM${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
if [ -z "${POLYTRACE_SHARED:-}" ]; then
    for d in "$ROOT/shared" "$ROOT/../shared"; do
        if [ -d "$d/polytrace-data" ]; then export POLYTRACE_SHARED="$(cd "$d" && pwd)"; break; fi
    done
fi
T_START=$(date +%s)

say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }
elapsed() { echo $(( $(date +%s) - T_START )); }

# ---- the machine -----------------------------------------------------------------------------
say "polytrace device check in $ROOT, OUT=$OUT"
# one interpreter start for every question about the machine (each import of torch costs seconds);
# the last line it prints is "<has cuda> <device name with _ for spaces> <gpu slug>"
MACHINE=$("$PY" - 2>>"$LOG" <<'EOF'
import platform
import sys

try:
    import numpy, pytest, pytest_benchmark, scipy, tabulate, torch, triton  # noqa: F401
except ImportError as exc:
    print(f"missing package: {exc}")
    print("0 - -")
    sys.exit(0)
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| triton", triton.__version__, "| cuda available", torch.cuda.is_available())
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"gpu {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs, "
          f"L2 {getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB")
try:
    import pynvml  # noqa: F401
    print("nvidia-ml-py present: the environment record reads clocks, power and processes")
except ImportError:
    print("nvidia-ml-py absent: the environment record will say unknown")
from polytrace.run.hardware import slug_for

cuda = torch.cuda.is_available()
if cuda:
    # the ceilings every % in the run is read against: a device copy (read + write) and a large bf16 GEMM
    def _time(fn, reps=10):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / reps

    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_s = _time(lambda: dst.copy_(src))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    gemm_s = _time(lambda: a @ a)
    print(f"ceilings (measured here): copy {2 * 2**30 / copy_s / 1e12:.2f} TB/s (read + write of 1 GiB), "
          f"bf16 GEMM {2 * 8192**3 / gemm_s / 1e12:.0f} TFLOP/s (8192^3)")
    del src, dst, a
name = torch.cuda.get_device_name(0) if cuda else "cpu"
print(int(cuda), name.replace(" ", "_"), slug_for(name) if cuda else "cpu")
EOF
)
echo "$MACHINE" | sed '$d' >>"$LOG"
read -r HAS_CUDA GPU_NAME GPU_SLUG <<<"$(echo "$MACHINE" | tail -1)"
if [ "${GPU_NAME:--}" = "-" ] || { [ "$HAS_CUDA" != "0" ] && [ "$HAS_CUDA" != "1" ]; }; then
    say "FATAL: a required package is missing or polytrace does not import (torch, triton, pytest, pytest-benchmark, scipy, tabulate, numpy); see $LOG"
    exit 3
fi
if command -v nvidia-smi >/dev/null 2>&1; then timeout 30 nvidia-smi >>"$LOG" 2>&1; fi
if [ "$HAS_CUDA" != "1" ]; then
    if [ "$ALLOW_CPU" != "1" ]; then
        say "FATAL: no CUDA GPU visible (pass --allow-cpu to run the CPU-interpreter path as a dry run)"
        exit 3
    fi
    export TRITON_INTERPRET=1
    say "no CUDA GPU: dry run in the Triton interpreter (timings are not performance)"
fi
GPU_NAME="${GPU_NAME//_/ }"
GPU_SLUG="${GPU_SLUG:-unknown}"
if [ -z "$COMMIT" ]; then
    COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || true)
    if [ -n "$COMMIT" ] && [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        COMMIT="$COMMIT-dirty"
    fi
fi
export POLYTRACE_COMMIT="${COMMIT:-unknown}"
say "device: ${GPU_NAME:-?} (slug $GPU_SLUG), commit $POLYTRACE_COMMIT"

LAST_LINE=""
FAILED=0
STATUS_LINES=()
VERSIONS=$(grep -E "^python " <<<"$MACHINE" | head -1)
[ -n "$VERSIONS" ] && STATUS_LINES+=("versions: $VERSIONS")
CEILINGS=$(grep -E "^ceilings " <<<"$MACHINE" | head -1)
[ -n "$CEILINGS" ] && STATUS_LINES+=("$CEILINGS")
# run_pytest LABEL HARD_TIMEOUT_S BUDGET_S PYTEST_ARGS...: output to the log, summary line in LAST_LINE
run_pytest() {
    local label=$1 hard=$2 budget=$3
    shift 3
    local tmp t0 rc
    tmp=$(mktemp)
    t0=$(date +%s)
    POLYTRACE_BENCH_BUDGET_S="$budget" timeout -s INT -k 20 "$hard" "$PY" -m pytest -p no:cacheprovider "$@" \
        >"$tmp" 2>&1
    rc=$?
    {
        echo "===== $label: rc $rc, $(( $(date +%s) - t0 )) s ====="
        cat "$tmp"
    } >>"$LOG"
    LAST_LINE=$(grep -E "[0-9]+ (passed|failed|skipped|deselected|error)|no tests ran" "$tmp" | tail -1 \
                | sed -e 's/=//g' -e 's/^ *//' -e 's/ *$//')
    if [ "$rc" = "124" ] || [ "$rc" = "137" ]; then LAST_LINE="HARD TIMEOUT after ${hard}s; ${LAST_LINE}"; fi
    FAILURES=$(grep -E "^(FAILED|ERROR) " "$tmp" | head -5)
    rm -f "$tmp"
    return $rc
}

# failed_step: the run fails; the first failures of the last run_pytest go under its status line
failed_step() {
    while IFS= read -r line; do [ -n "$line" ] && STATUS_LINES+=("    $line"); done <<<"$FAILURES"
    FAILED=1
}

# raised_step NAME WHAT: a step that raised fails the run, named on its own status line
raised_step() {
    STATUS_LINES+=("$1: RAISED - $2")
    FAILED=1
}

# ---- 0. Triton cache warm-up (compiles every default config once, for this GPU) -------------
if [ "$HAS_CUDA" = "1" ]; then
    ARCH=$("$PY" -c "import torch; c = torch.cuda.get_device_capability(); print(c[0] * 10 + c[1])" 2>>"$LOG")
    case "$ARCH" in 80|90)
        say "warming the Triton cache: scripts/static_report.py --arch $ARCH (cap 90s)"
        timeout -k 10 90 "$PY" scripts/static_report.py --arch "$ARCH" -o "$IMPORT_SHIM/static.json" >>"$LOG" 2>&1
        rc=$?
        # rc 1 is a floor missed (reported, the run goes on); anything else is the step raising
        if [ "$rc" = "0" ] || [ "$rc" = "1" ]; then
            STATUS_LINES+=("cache warm-up: compiled the default configs for sm_$ARCH$([ "$rc" = "1" ] && echo " (some miss a static floor: see log)")")
        else
            raised_step "cache warm-up" "scripts/static_report.py exited $rc (see log)"
        fi ;;
    *) STATUS_LINES+=("cache warm-up: skipped (no static report for capability ${ARCH:-?})") ;;
    esac
fi

# ---- 1. kernel tests and GPU-marked tests ----------------------------------------------------
if [ "$SKIP_TESTS" = "1" ]; then
    STATUS_LINES+=("kernel tests: skipped (--skip-tests)")
else
    FILES=()
    for f in $KERNEL_TESTS; do [ -f "$f" ] && FILES+=("$f"); done
    T_TESTS=$(date +%s)
    if [ "${#FILES[@]}" = "0" ]; then
        STATUS_LINES+=("kernel tests: FAILED - none of the files exist: $KERNEL_TESTS")
        FAILED=1
    else
        cap=$(( TESTS_BUDGET_S - 30 ))
        [ "$cap" -lt 30 ] && cap=30
        say "kernel tests: ${FILES[*]} (cap ${cap}s)"
        run_pytest "kernel tests" "$cap" 0 -q -rfE "${FILES[@]}"
        rc=$?
        if [ "$rc" = "0" ]; then
            STATUS_LINES+=("kernel tests: passed - ${LAST_LINE:-?}")
        else
            STATUS_LINES+=("kernel tests: FAILED (rc $rc) - ${LAST_LINE:-no summary line, see log}")
            failed_step
        fi
    fi
    if [ "$HAS_CUDA" = "1" ]; then
        left=$(( TESTS_BUDGET_S - ($(date +%s) - T_TESTS) ))
        [ "$left" -lt 30 ] && left=30
        IGNORES=()
        for f in "${FILES[@]}"; do IGNORES+=("--ignore=$f"); done
        say "other GPU-marked tests (cap ${left}s)"
        # a test module that cannot be imported here (e.g. hypothesis absent) must not stop the others
        run_pytest "gpu-marked tests" "$left" 0 -q -rfE -m gpu --continue-on-collection-errors "${IGNORES[@]}" tests
        rc=$?
        if [ "$rc" = "0" ] || [ "$rc" = "5" ]; then
            STATUS_LINES+=("gpu-marked tests: passed - ${LAST_LINE:-none collected}")
        else
            STATUS_LINES+=("gpu-marked tests: FAILED (rc $rc) - ${LAST_LINE:-no summary line, see log}")
            failed_step
        fi
    else
        STATUS_LINES+=("gpu-marked tests: not run (no CUDA)")
    fi
fi

# ---- 1b. the probe of the static decisions -------------------------------------------------
if [ "$PROBE" = "1" ] && [ "$HAS_CUDA" = "1" ]; then
    export POLYTRACE_TUNING_DIR="$IMPORT_SHIM/tuning"
    say "probe: scripts/device_probe.py (cap ${PROBE_CAP_S}s)"
    timeout -s INT -k 10 "$PROBE_CAP_S" "$PY" scripts/device_probe.py --tuning-dir "$POLYTRACE_TUNING_DIR" \
        >"$IMPORT_SHIM/probe.txt" 2>&1
    rc=$?
    cat "$IMPORT_SHIM/probe.txt" >>"$LOG"
    while IFS= read -r line; do STATUS_LINES+=("$line"); done < <(grep "^probe " "$IMPORT_SHIM/probe.txt" | cut -c1-400)
    if [ "$rc" != "0" ]; then
        raised_step "probe" "scripts/device_probe.py exited $rc$(grep -q '^probe FAILED' "$IMPORT_SHIM/probe.txt" || echo ' (see log)')"
    fi
elif [ "$PROBE" = "1" ]; then
    "$PY" scripts/device_probe.py --list >>"$LOG" 2>&1 || raised_step "probe" "scripts/device_probe.py --list failed"
    STATUS_LINES+=("probe: not run (no CUDA)")
fi

# ---- 2. suites under the total budget --------------------------------------------------------
set -- $SUITES
N_SUITES=$#
T_SUITES=$(date +%s)
SELECT_ARGS=()
[ -n "$SELECT" ] && SELECT_ARGS=(-k "$SELECT")
i=0
if [ "$VIA_BENCH" = "1" ]; then
    # The same suites through `polytrace bench` (one pytest per shard, serial: one GPU here). Its
    # exit 1 means a failed shard or cases the budget left pending; the per-case outcomes are in
    # the log and the merged JSON, and a failed shard is named on its own line.
    [ -n "$BENCH_DIR" ] || BENCH_DIR="$(mktemp -d)"
    BENCH_ARGS=(-o "$BENCH_DIR" --budget-s "$BUDGET_S" --pytest-arg=--benchmark-disable-gc -q)
    for s in $SUITES; do BENCH_ARGS+=(--suite "$s"); done
    [ -n "$SELECT" ] && BENCH_ARGS+=(-k "$SELECT")
    [ "$HAS_CUDA" != "1" ] && BENCH_ARGS+=(--allow-cpu)
    say "suites through polytrace bench into $BENCH_DIR (budget ${BUDGET_S}s)"
    timeout -s INT -k 20 $(( BUDGET_S + 120 )) "$PY" -m polytrace bench "${BENCH_ARGS[@]}" >>"$LOG" 2>&1
    rc=$?
    if [ "$rc" = "130" ] || [ "$rc" = "124" ]; then
        "$PY" -m polytrace bench --merge "$BENCH_DIR" >>"$LOG" 2>&1
    fi
    for s in $SUITES; do
        if [ -f "$BENCH_DIR/$GPU_SLUG/$s.json" ]; then
            cp "$BENCH_DIR/$GPU_SLUG/$s.json" "$OUT/$s.json"
            STATUS_LINES+=("suite $s: ran through polytrace bench (rc $rc) -> $s.json")
        else
            STATUS_LINES+=("suite $s: FAILED - polytrace bench wrote no $GPU_SLUG/$s.json (rc $rc, see log)")
            FAILED=1
        fi
    done
    if grep -q "^polytrace: error: shard" "$LOG"; then
        while IFS= read -r line; do STATUS_LINES+=("    $line"); done < <(grep "^polytrace: error: shard" "$LOG")
        FAILED=1
    fi
    SUITES_DONE=1
fi
for s in $SUITES; do
    [ "${SUITES_DONE:-0}" = "1" ] && break
    i=$((i + 1))
    file="suites/test_$s.py"
    if [ ! -f "$file" ]; then
        STATUS_LINES+=("suite $s: FAILED - $file not found")
        say "suite $s: $file not found"
        FAILED=1
        continue
    fi
    left=$(( BUDGET_S - ($(date +%s) - T_SUITES) ))
    share=$(( left / (N_SUITES - i + 1) ))
    [ "$share" -lt 30 ] && share=30
    soft=$(( share - 20 ))  # leaves time for the benchmark in flight and the JSON write
    [ "$soft" -lt 15 ] && soft=15
    hard=$(( share + 30 ))
    say "suite $s: budget ${soft}s (hard stop ${hard}s)"
    run_pytest "suite $s" "$hard" "$soft" -q "$file" "${SELECT_ARGS[@]}" --benchmark-json="$OUT/$s.json" \
        --benchmark-save-data --benchmark-disable-gc --benchmark-columns=min,median,iqr,rounds \
        --benchmark-sort=name -rfEs
    rc=$?
    if [ "$rc" = "0" ]; then
        STATUS_LINES+=("suite $s: ran - ${LAST_LINE:-?} -> $s.json")
    else
        where="-> $s.json"
        [ -f "$OUT/$s.json" ] || where="- NO JSON (nothing measured)"
        STATUS_LINES+=("suite $s: FAILED (rc $rc) - ${LAST_LINE:-?} $where")
        failed_step
    fi
done
# ---- 2b. optional: the polytrace ab GPU check (--ab-check) ---------------------------------
if [ "$AB_CHECK" = "1" ]; then
    if [ "$HAS_CUDA" = "1" ]; then
        say "ab GPU check: tests/measure/test_ab_gpu.py (cap ${AB_CHECK_CAP_S}s)"
        POLYTRACE_AB_GPU_CHECK=1 run_pytest "ab gpu check" "$AB_CHECK_CAP_S" 0 -q -rfEs -s tests/measure/test_ab_gpu.py
        rc=$?
        if [ "$rc" = "0" ]; then
            STATUS_LINES+=("ab gpu check: passed - ${LAST_LINE:-?} (measured changes in the log)")
        else
            STATUS_LINES+=("ab gpu check: FAILED (rc $rc) - ${LAST_LINE:-no summary line, see log}")
            failed_step
        fi
    else
        STATUS_LINES+=("ab gpu check: not run (no CUDA)")
    fi
fi

# pytest -rs prints "SKIPPED [n] file:line: reason"; sum n over the budget's reason
TOTAL_BUDGET_SKIPS=$(grep "time budget POLYTRACE_BENCH_BUDGET_S" "$LOG" | sed -n 's/^SKIPPED \[\([0-9]*\)\].*/\1/p' \
                     | awk '{s += $1} END {print s + 0}')

# ---- 3. store (optional), summary, gate, missing benchmarks ----------------------------------
if [ "$STORE" = "1" ]; then
    say "storing results under $RESULTS"
    STORE_ARGS=(--results "$RESULTS")
    [ "$SET_BASELINE" = "1" ] && STORE_ARGS+=(--set-baseline)
    [ "$ALLOW_CPU" = "1" ] && STORE_ARGS+=(--allow-cpu)
    [ "$FORCE" = "1" ] && STORE_ARGS+=(--force)
    "$PY" -m suites.runbook store "$OUT" $SUITES "${STORE_ARGS[@]}" >>"$LOG" 2>&1
    rc=$?
    STATUS_LINES+=("store: $(grep -cE '^(stored|baseline) ' "$LOG") file(s) written$([ "$rc" != "0" ] && echo ", SOME REFUSED (see log)")")
    if [ "$rc" != "0" ] && [ "$rc" != "1" ]; then raised_step "store" "python -m suites.runbook store exited $rc"; fi
    [ "$rc" = "1" ] && FAILED=1
fi

SUMMARY_ARGS=(--results "$RESULTS")
[ "$ALLOW_MISSING" = "1" ] && SUMMARY_ARGS+=(--allow-missing)
SUMMARY_OUT=$("$PY" -m suites.runbook summary "$OUT" "$SUMMARY" "$GPU_SLUG" $SUITES "${SUMMARY_ARGS[@]}" 2>>"$LOG")
rc=$?
echo "$SUMMARY_OUT" >>"$LOG"
if [ "$rc" != "0" ]; then
    FAILED=1
    [ "$rc" != "1" ] && raised_step "summary" "python -m suites.runbook summary exited $rc (see log)"
    [ -z "$SUMMARY_OUT" ] && SUMMARY_OUT="summary step failed (rc $rc): see device_check.log"
fi
# The summary reports an exception in the gate or the step estimate as a line and goes on; the run
# still fails, naming the step. On a CPU dry run the estimate's refusal of CPU timings is expected.
GATE_RAISED=$(grep -E "^gate vs .*: could not run: " <<<"$SUMMARY_OUT" | head -1)
[ -n "$GATE_RAISED" ] && raised_step "gate" "${GATE_RAISED#gate vs }"
EST_RAISED=$(grep -h "^step estimate from this run: not computed" "$SUMMARY" 2>/dev/null | head -1)
if [ -n "$EST_RAISED" ]; then
    if [ "$HAS_CUDA" = "1" ] || [ "${POLYTRACE_RUNBOOK_STRICT_ESTIMATE:-0}" = "1" ]; then
        raised_step "step estimate" "${EST_RAISED#step estimate from this run: }"
    else
        STATUS_LINES+=("step estimate: not computed on a CPU dry run (${EST_RAISED#step estimate from this run: not computed })")
    fi
fi
# the summary file repeats these lines under the status lines; without it, show them here
[ -f "$SUMMARY" ] || while IFS= read -r line; do [ -n "$line" ] && STATUS_LINES+=("$line"); done <<<"$SUMMARY_OUT"

# keep the log under the device tool's 16 MiB per file
if [ "$(wc -c <"$LOG")" -gt 15000000 ]; then
    { head -c 5000000 "$LOG"; echo; echo "... [log cut to fit 16 MiB] ..."; tail -c 9000000 "$LOG"; } >"$LOG.cut"
    mv "$LOG.cut" "$LOG"
fi

# ---- 4. one-screen summary -------------------------------------------------------------------
VERDICT="PASSED"
[ "$FAILED" != "0" ] && VERDICT="FAILED"
SCREEN="$(mktemp)"
{
    echo "== polytrace device check: ${GPU_NAME:-?} ($GPU_SLUG), commit $POLYTRACE_COMMIT, $(elapsed) s total: $VERDICT =="
    for line in "${STATUS_LINES[@]}"; do echo "  $line"; done
    [ "${TOTAL_BUDGET_SKIPS:-0}" != "0" ] && echo "  benchmarks skipped by the time budget: $TOTAL_BUDGET_SKIPS (raise --budget-s)"
    echo
    if [ -f "$SUMMARY" ]; then
        sed -n '1,/^# full tables$/p' "$SUMMARY" | sed '$d'
    else
        echo "  (no summary: the summary step failed, see device_check.log)"
    fi
    echo "files in $OUT: $(cd "$OUT" && ls -1 | tr '\n' ' ')"
    echo "store them at home: PYTHONPATH=. python3 -m polytrace results store OUT_DIR/*.json"
} | tee "$SCREEN"
if [ -f "$SUMMARY" ]; then
    { cat "$SCREEN"; echo; cat "$SUMMARY"; } >"$SUMMARY.tmp" && mv "$SUMMARY.tmp" "$SUMMARY"
else
    cp "$SCREEN" "$SUMMARY"
fi
rm -f "$SCREEN"
exit "$FAILED"
