#!/usr/bin/env bash
# polytrace GPU runbook: turn a GPU lease into result files.
#
# On a machine with a CUDA GPU and the packages already installed (torch, triton, pytest,
# pytest-benchmark, scipy, tabulate, matplotlib, tqdm; no network, polytrace NOT pip-installed),
# from anywhere:
#
#   scripts/device_check.sh [--budget-s 360] [--tests-budget-s 90] [--suites "logprob attention packing workload"]
#                           [--skip-tests] [--commit SHA] [--store] [--set-baseline] [--allow-cpu]
#
# 1. runs the GPU-marked tests (pytest -m gpu tests/) under their own cap (--tests-budget-s);
# 2. runs every suite (suites/test_<name>.py) with pytest-benchmark, sharing the total time budget
#    (--budget-s, default 6 minutes) between them: each suite gets the time left divided by the
#    suites left, enforced in-process (POLYTRACE_BENCH_BUDGET_S: later benchmarks skip with a
#    reason and the JSON is still written) with a hard `timeout` behind it (SIGINT first, so
#    pytest still writes what it measured; SIGKILL 20 s later);
# 3. writes under $OUT (default ./out), at most 8 plain files, no sub-folders:
#      <suite>.json        pytest-benchmark JSON with raw rounds, one per suite run
#      device_check.log    everything the steps printed
#      summary.txt         the one-screen summary plus every suite's full table
#      gate.md             the regression gate against results/baselines/<gpu-slug>.json, when one exists
# 4. prints the one-screen summary.
#
# --store / --set-baseline copy the JSON files into results/<gpu-slug>/<date>_<commit>_<suite>.json
# and merge them into results/baselines/<gpu-slug>.json in THIS tree. On a leased machine whose
# tree does not come back, fetch $OUT instead and run the same step at home:
#   PYTHONPATH=. python3 -m polytrace results store OUT_DIR/*.json
#   PYTHONPATH=. python3 -m polytrace results set-baseline OUT_DIR/*.json      # when it is the new baseline
#
# Exit status: 0 when every step ran (test failures and regressions are reported, not fatal: the
# summary says what happened), 3 when the machine cannot run the check (no GPU, missing package).

set -uo pipefail

BUDGET_S=360
TESTS_BUDGET_S=90
SUITES="logprob attention packing workload"
# One representative micro-batch per profile keeps the attention suite (about 330 cases at 2) inside
# a short lease; export POLYTRACE_ATTENTION_BATCHES=2 or more for a full run.
export POLYTRACE_ATTENTION_BATCHES="${POLYTRACE_ATTENTION_BATCHES:-1}"
SKIP_TESTS=0
STORE=0
SET_BASELINE=0
ALLOW_CPU=0
COMMIT="${POLYTRACE_COMMIT:-}"

usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --budget-s) BUDGET_S="${2:?--budget-s needs seconds}"; shift 2 ;;
        --tests-budget-s) TESTS_BUDGET_S="${2:?--tests-budget-s needs seconds}"; shift 2 ;;
        --suites) SUITES="${2:?--suites needs a list}"; shift 2 ;;
        --skip-tests) SKIP_TESTS=1; shift ;;
        --commit) COMMIT="${2:?--commit needs a value}"; shift 2 ;;
        --store) STORE=1; shift ;;
        --set-baseline) STORE=1; SET_BASELINE=1; shift ;;
        --allow-cpu) ALLOW_CPU=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "device_check.sh: unknown option $1 (see --help)" >&2; exit 3 ;;
    esac
done
for n in "$BUDGET_S" "$TESTS_BUDGET_S"; do
    case "$n" in ''|*[!0-9]*) echo "device_check.sh: budgets are whole seconds, got '$n'" >&2; exit 3 ;; esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 3
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT" || { echo "device_check.sh: cannot create OUT=$OUT" >&2; exit 3; }
OUT="$(cd "$OUT" && pwd)"
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
if ! "$PY" -c "import torch, triton, pytest, pytest_benchmark, scipy, tabulate, numpy" >>"$LOG" 2>&1; then
    say "FATAL: a required package is missing (torch, triton, pytest, pytest-benchmark, scipy, tabulate, numpy); see $LOG"
    exit 3
fi
"$PY" - >>"$LOG" 2>&1 <<'EOF'
import platform, sys
import torch, triton
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| triton", triton.__version__, "| cuda available", torch.cuda.is_available())
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"gpu {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs")
EOF
if command -v nvidia-smi >/dev/null 2>&1; then timeout 30 nvidia-smi >>"$LOG" 2>&1; fi

HAS_CUDA=$("$PY" -c "import torch; print(int(torch.cuda.is_available()))" 2>>"$LOG" || echo 0)
if [ "$HAS_CUDA" != "1" ]; then
    if [ "$ALLOW_CPU" != "1" ]; then
        say "FATAL: no CUDA GPU visible (pass --allow-cpu to run the CPU-interpreter path as a dry run)"
        exit 3
    fi
    export TRITON_INTERPRET=1
    say "no CUDA GPU: dry run in the Triton interpreter (timings are not performance)"
fi
read -r GPU_NAME GPU_SLUG < <("$PY" - 2>>"$LOG" <<'EOF'
import torch
from polytrace.hardware import slug_for
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
print(name.replace(" ", "_"), slug_for(name) if name != "cpu" else "cpu")
EOF
)
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
    rm -f "$tmp"
    return $rc
}

STATUS_LINES=()

# ---- 1. GPU-marked tests ---------------------------------------------------------------------
if [ "$SKIP_TESTS" = "1" ]; then
    STATUS_LINES+=("gpu tests: skipped (--skip-tests)")
else
    say "GPU-marked tests (cap ${TESTS_BUDGET_S}s)"
    # a test module that cannot be imported here (e.g. hypothesis absent) must not stop the others
    run_pytest "gpu tests" "$TESTS_BUDGET_S" 0 -q -m gpu --continue-on-collection-errors tests
    rc=$?
    [ "$rc" = "5" ] && LAST_LINE="no GPU-marked tests collected"
    STATUS_LINES+=("gpu tests: rc $rc - ${LAST_LINE:-no summary line (see log)}")
fi

# ---- 2. suites under the total budget --------------------------------------------------------
set -- $SUITES
N_SUITES=$#
T_SUITES=$(date +%s)
i=0
for s in $SUITES; do
    i=$((i + 1))
    file="suites/test_$s.py"
    if [ ! -f "$file" ]; then
        STATUS_LINES+=("suite $s: MISSING ($file not found)")
        say "suite $s: $file not found, skipped"
        continue
    fi
    left=$(( BUDGET_S - ($(date +%s) - T_SUITES) ))
    share=$(( left / (N_SUITES - i + 1) ))
    [ "$share" -lt 30 ] && share=30
    soft=$(( share - 20 ))  # leaves time for the benchmark in flight and the JSON write
    [ "$soft" -lt 15 ] && soft=15
    hard=$(( share + 30 ))
    say "suite $s: budget ${soft}s (hard stop ${hard}s)"
    run_pytest "suite $s" "$hard" "$soft" -q "$file" --benchmark-json="$OUT/$s.json" --benchmark-save-data \
        --benchmark-disable-gc --benchmark-columns=min,median,iqr,rounds --benchmark-sort=name -rs
    rc=$?
    if [ -f "$OUT/$s.json" ]; then
        STATUS_LINES+=("suite $s: rc $rc - ${LAST_LINE:-?} -> $s.json")
    else
        STATUS_LINES+=("suite $s: rc $rc - ${LAST_LINE:-?} - NO JSON (nothing measured)")
    fi
done
# pytest -rs prints "SKIPPED [n] file:line: reason"; sum n over the budget's reason
TOTAL_BUDGET_SKIPS=$(grep "time budget POLYTRACE_BENCH_BUDGET_S" "$LOG" | sed -n 's/^SKIPPED \[\([0-9]*\)\].*/\1/p' \
                     | awk '{s += $1} END {print s + 0}')

# ---- 3. store (optional), summary, gate ------------------------------------------------------
if [ "$STORE" = "1" ]; then
    say "storing results under results/"
    "$PY" - "$OUT" "$SET_BASELINE" "$ALLOW_CPU" $SUITES >>"$LOG" 2>&1 <<'EOF'
import sys
from pathlib import Path
from polytrace.errors import PolytraceError
from polytrace.results import set_baseline, store_result

out, set_base, allow_cpu, suites = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4:]
files = [out / f"{s}.json" for s in suites if (out / f"{s}.json").is_file()]
for f in files:
    try:
        print("stored", store_result(f, "results", overwrite=True))
    except PolytraceError as exc:
        print("store failed:", exc)
if set_base and files:
    try:
        print("baseline", set_baseline(files, "results", allow_cpu=allow_cpu))
    except PolytraceError as exc:
        print("set-baseline failed:", exc)
EOF
    STATUS_LINES+=("store: $(grep -E '^(stored|baseline|store failed|set-baseline failed)' "$LOG" | wc -l) action(s), see log")
fi

"$PY" - "$OUT" "$SUMMARY" "$GPU_SLUG" $SUITES >>"$LOG" 2>&1 <<'EOF'
import sys
import traceback
from pathlib import Path

out, summary, slug, suites = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
brief, full, gate_line = [], [], ""
try:
    from polytrace.results import compare, format_markdown, format_show, load_result
    from polytrace.results.store import baseline_path, format_brief

    files = [out / f"{s}.json" for s in suites if (out / f"{s}.json").is_file()]
    for f in files:
        try:
            r = load_result(f)
            brief.append(format_brief(r))
            full.append(format_show(r))
        except Exception as exc:  # one unreadable file must not hide the others
            brief.append(f"{f.name}: cannot read: {exc}")
    base = baseline_path("results", slug)
    if files and base.is_file():
        from polytrace.results.schema import merge

        cand = merge([load_result(f) for f in files], name=str(out))
        report = compare(load_result(base), cand)
        if report.exit_code != 2:  # the change's cost on the default workload, under the verdict as in polytrace gate
            from polytrace.compose.impact import step_time_line

            report.impact.append(step_time_line(load_result(base), cand)["line"])
        (out / "gate.md").write_text(format_markdown(report))
        gate_line = f"gate vs {base}: {report.verdict} (exit {report.exit_code}) -> gate.md"
    elif files:
        gate_line = f"gate: no baseline at {base} (set one with: polytrace results set-baseline {out}/*.json)"
    if files:  # the default workload's step priced from this run's timings: which families are measured
        try:
            from polytrace.compose import estimate
            from polytrace.compose.breakdown import kernel_table, source_lines

            est = estimate("dapo-math-32b", "qwen2.5-32b", slug, 32, steps=range(8), results=[str(f) for f in files])
            brief.append("step estimate priced from this run (dapo-math-32b / qwen2.5-32b / 32 GPUs, estimated):\n"
                         + kernel_table(est["summary"]) + "\n" + "\n".join(source_lines(est["summary"])))
        except Exception as exc:  # e.g. a CPU dry run: CPU timings are not rates
            brief.append(f"step estimate from this run: not computed ({exc})")
except Exception:
    traceback.print_exc()
    gate_line = "summary/gate step failed: see the traceback in the log"
summary.write_text("\n\n".join(brief) + ("\n\n" + gate_line if gate_line else "") + "\n\n# full tables\n\n"
                   + "\n\n".join(full) + "\n")
print(gate_line)
EOF

# keep the log under the device tool's 16 MiB per file
if [ "$(wc -c <"$LOG")" -gt 15000000 ]; then
    { head -c 5000000 "$LOG"; echo; echo "... [log cut to fit 16 MiB] ..."; tail -c 9000000 "$LOG"; } >"$LOG.cut"
    mv "$LOG.cut" "$LOG"
fi

# ---- 4. one-screen summary -------------------------------------------------------------------
{
    echo "== polytrace device check: ${GPU_NAME:-?} ($GPU_SLUG), commit $POLYTRACE_COMMIT, $(elapsed) s total =="
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
} | tee "$OUT/.screen"
{ cat "$OUT/.screen"; echo; cat "$SUMMARY"; } >"$SUMMARY.tmp" && mv "$SUMMARY.tmp" "$SUMMARY"
rm -f "$OUT/.screen"
exit 0
