#!/usr/bin/env python3
"""Mutation fuzzer for polytrace's file inputs (not run in CI: minutes, not seconds).

Takes real inputs (PolyTrace traces and verl logs from the shared folder, fitted and built-in
profiles, pytest-benchmark result files: synthesised here, or your own with ``--results``),
mutates them (hostile JSON values in any field, deleted keys, duplicated, truncated, over-long or
100,000-deep nested lines, invalid UTF-8, a FIFO named like a step file, ...) and runs the
commands that read them as subprocesses under a timeout and a memory limit:

    describe, fidelity, fit, validate, results show, gate, plot

Each run is classified:

- ``ok``: exit 0, no traceback, no ``nan``/``inf`` in the output;
- ``error``: a clean ``polytrace: error: ...`` (one line, exit 2; the gate's exit 1 is a verdict);
- ``traceback``: a Python traceback (the deepest frame in this repository is reported);
- ``hang``: killed at the timeout;
- ``non-finite``: exit 0 but ``nan``/``inf`` in what was printed or written;
- ``unreadable``: ``fit`` exited 0 but ``describe`` refuses the profile it wrote;
- ``crash``: any other exit (a signal, the memory limit, a usage dump).

Run i of seed s is reproducible alone: ``--seed s --only i`` (``--keep DIR`` stores each failing
case's input and command line).

    PYTHONPATH=.:.shim python scripts/fuzz_inputs.py --shared ../shared --runs 700 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fuzz_mutations import mutate_file, mutate_folder  # beside this script (its folder is on sys.path)

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("describe", "fidelity", "fit", "validate", "calibrate", "estimate --calibration", "results show", "gate",
            "impact", "plot")
MEMORY_LIMIT = 6 << 30  # bytes of address space per child: a value-sized allocation fails, not the host


# --------------------------------------------------------------------------- seeds


def _first_lines(src: Path, dst: Path, n: int) -> Path:
    with src.open() as fh:
        lines = [next(fh) for _ in range(n)]
    dst.write_text("".join(lines))
    return dst


def build_seeds(shared: Path, work: Path, extra_results: list[Path]) -> dict[str, list[Path]]:
    """Unmutated inputs per kind: trace files, trace folders, profiles, logs, results."""
    sys.path[:0] = [str(REPO), str(REPO / ".shim")]
    import polytrace
    from polytrace.workload.profiles import fit_profile

    data = shared / "polytrace-data"
    seeds: dict[str, list[Path]] = {k: [] for k in ("trace", "folder", "profile", "log", "result", "calibration")}
    t = work / "seeds" / "traces"
    t.mkdir(parents=True)
    single = data / "{}/profile/packed_length_log/{}/packed_lengths_step_{}.jsonl"
    multi = data / "search_r1/profile/multiturn_workload_log/0617_0223/multiturn_workload_step_{}.jsonl"
    picks = {  # name: (source, lines kept)
        "dapo_step_0.jsonl": (Path(str(single).format("verl", "20260610_092349", 0)), 96),
        "coder_step_0.jsonl": (Path(str(single).format("rllm", "20260616_024512", 0)), 16),
        "video_step_1.jsonl": (Path(str(single).format("verl-video", "20260609_033329", 1)), 64),
        "search_step_0.jsonl": (Path(str(multi).format(0)), 48),
        "search_step_5.jsonl": (Path(str(multi).format(5)), 47),
    }
    for name, (src, n) in picks.items():
        seeds["trace"].append(_first_lines(src, t / name, n))
    dapo = polytrace.load_trace(t / "dapo_step_0.jsonl", max_response_len=32768)
    search = polytrace.load_trace(t / "search_step_0.jsonl")
    polytrace.save_trace(dapo, t / "dapo_native.jsonl")
    polytrace.save_trace(search, t / "search_native.jsonl")
    seeds["trace"] += [t / "dapo_native.jsonl", t / "search_native.jsonl"]
    paper = {str(s.step): {"input": [g.prompt_len for g in s.groups],
                           "output": [r.length for g in s.groups for r in g.responses]} for s in dapo.steps}
    (t / "paper.json").write_text(json.dumps(paper))
    paper_mt = {str(s.step): [{"input": [tn.prompt_tokens for tn in r.turns],
                               "output": [tn.completion_tokens for tn in r.turns]}
                              for g in s.groups for r in g.responses] for s in search.steps}
    (t / "paper_mt.json").write_text(json.dumps(paper_mt))
    seeds["trace"] += [t / "paper.json", t / "paper_mt.json"]
    for name, srcs in {"dapo_run": ["dapo_step_0.jsonl"], "search_run": ["search_step_0.jsonl",
                                                                          "search_step_5.jsonl"]}.items():
        d = work / "seeds" / name
        d.mkdir()
        for i, s in enumerate(srcs):
            kind = "multiturn_workload" if "search" in s else "packed_lengths"
            shutil.copy(t / s, d / f"{kind}_step_{i if 'search' not in s else int(s[-7])}.jsonl")
        seeds["folder"].append(d)
    p = work / "seeds" / "profiles"
    p.mkdir()
    (p / "fitted_dapo.json").write_text(fit_profile(dapo, name="fitted_dapo").dumps())
    for name in ("search-r1-7b", "model-b-math", "model-b-tooluse"):
        shutil.copy(REPO / "polytrace/workload/profiles/data" / f"{name}.json", p / f"{name}.json")
    seeds["profile"] = sorted(p.iterdir())
    seeds["log"] = sorted((shared / "validation-logs").glob("*.log"))
    r = work / "seeds" / "results"
    r.mkdir()
    for name, obj in synth_results().items():
        (r / name).write_text(json.dumps(obj))
    seeds["result"] = sorted(r.iterdir()) + list(extra_results)
    from polytrace.calibrate.files import calibrate_from_log, calibrate_from_stage_times

    c = work / "seeds" / "calibrations"
    c.mkdir()
    gemma = next((p for p in seeds["log"] if "gemma" in p.name), seeds["log"][0])
    calibrate_from_log(gemma, c / "from_log.json")
    calibrate_from_stage_times("gen=60,old_log_prob=8,ref=8,update_actor=30", c / "from_stage_times.json",
                               model="qwen2.5-7b", gpu="h100", gpus=8)
    seeds["calibration"] = sorted(c.iterdir())
    return seeds


def synth_results() -> dict[str, dict]:
    """pytest-benchmark files as the suites write them: a baseline and a candidate (ours and a
    torch control over five weighted shapes), a planner benchmark with no bytes moved, and one
    without any extra_info (a plain pytest-benchmark run)."""
    def bench(shape, weight, median, provider, kind, family="logprob", kernel="token_logprobs", mode="fwd",
              rounds=12, rng=None, extra=True, nbytes=True):
        data = [median * (1 + 0.02 * rng.uniform(-1, 1)) for _ in range(rounds)]
        tokens = int(shape.split("=")[1].split(",")[0])
        b = {"group": None, "name": f"test_{kernel}[{provider}-{shape}]",
             "fullname": f"suites/test_{family}.py::test_{kernel}[{provider}-{shape}]",
             "params": None, "param": None, "options": {"timer": "perf_counter"},
             "stats": {"min": min(data), "max": max(data), "mean": sum(data) / len(data),
                       "median": sorted(data)[len(data) // 2], "rounds": len(data), "iterations": 1, "data": data}}
        if extra:
            b["extra_info"] = {
                "family": family, "kernel": kernel, "provider": provider, "provider_kind": kind, "mode": mode,
                "shape": {"tokens": tokens}, "shape_id": shape, "profile": "dapo-math-32b", "seed": 0, "step": 0,
                "weight": weight, "flops": 2.0 * tokens * 32000 if nbytes else 0.0,
                "bytes_moved": 2.0 * tokens * 32000 if nbytes else 0.0, "roofline": "hbm",
                "kernel_hash": "a1b2c3d4e5f60718", "measured_on": "cuda", "device_name": "NVIDIA H200"}
        return b

    def result(seed, slow=1.0, **kw):
        rng = random.Random(seed)
        shapes = [("tokens=4096,vocab=32000", 0.4, 2e-3), ("tokens=8192,vocab=32000", 0.3, 4e-3),
                  ("tokens=16384,vocab=32000", 0.2, 8e-3), ("tokens=32768,vocab=32000", 0.08, 16e-3),
                  ("tokens=65536,vocab=32000", 0.02, 32e-3)]
        benches = [bench(s, w, m * (slow if kind == "ours" else 1.5), prov, kind, rng=rng, **kw)
                   for prov, kind in (("triton", "ours"), ("torch", "baseline")) for s, w, m in shapes]
        return {"machine_info": {"node": "synthetic", "polytrace": {
            "measured_on": "cuda", "gpu_name": "NVIDIA H200", "gpu_slug": "h200", "torch_version": "2.11.0",
            "triton_version": "3.6.0", "cuda_version": "12.8", "driver_version": "570.1", "commit": "abc123",
            "kernel_hashes": {"logprob": "a1b2c3d4e5f60718"}, "suite_hash": "ssss"}},
            "commit_info": {"id": "abc123"}, "benchmarks": benches,
            "datetime": "2026-11-02T10:00:00.000000+00:00", "version": "5.2.3"}

    return {"base.json": result(1), "cand.json": result(2, slow=1.02),
            "planner.json": result(3, family="packing", kernel="balance_partitions", mode="plan", nbytes=False),
            "plain.json": result(4, extra=False)}


# --------------------------------------------------------------------------- runs


@dataclass
class Outcome:
    command: str
    index: int
    kind: str  # ok | error | traceback | hang | non-finite | unreadable | crash
    argv: list[str]
    mutation: str
    where: str = ""  # traceback: deepest frame of ours, and the exception type
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Plan:
    argv: list[str]
    mutation: str
    inputs: list[Path] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)  # outputs to scan for non-finite numbers


def plan_run(rng: random.Random, command: str, seeds: dict, case: Path) -> Plan:
    case.mkdir(parents=True)
    poly = [sys.executable, "-m", "polytrace"]

    def mutated(kind: str) -> tuple[Path, str]:
        src = rng.choice(seeds[kind])
        if kind == "folder":
            dst = case / src.name
            return dst, mutate_folder(rng, src, dst)
        dst = case / src.name
        return dst, f"{src.name}: {mutate_file(rng, src, dst)}"

    def trace_input() -> tuple[Path, str]:
        return mutated("folder" if rng.random() < 0.3 else "trace")

    if command == "describe":
        path, what = mutated("profile") if rng.random() < 0.25 else trace_input()
        return Plan(poly + ["describe", str(path), "--json"], what, [path])
    if command == "fidelity":
        if rng.random() < 0.3:
            prof, what = mutated("profile")
            return Plan(poly + ["fidelity", str(prof), str(seeds["trace"][0]), "--replicas", "1", "--json"], what,
                        [prof])
        path, what = trace_input()
        return Plan(poly + ["fidelity", "dapo-math-32b", str(path), "--replicas", "1", "--json"], what, [path])
    if command == "fit":
        path, what = trace_input()
        out = case / "fitted.json"
        return Plan(poly + ["fit", str(path), "-o", str(out)], what, [path], [out])
    if command == "validate":
        path, what = mutated("log")
        return Plan(poly + ["validate", str(path), "--json"], what, [path])
    if command == "calibrate":
        path, what = mutated("log")
        out = case / "cal.json"
        return Plan(poly + ["calibrate", str(path), "-o", str(out)], what, [path], [out])
    if command == "estimate --calibration":
        path, what = mutated("calibration")
        model, gpus = ("gemma-2-2b", "2") if path.name == "from_log.json" else ("qwen2.5-7b", "8")
        return Plan(poly + ["estimate", "--model", model, "--gpu", "a100-80g", "--gpus", gpus, "--step", "0",
                            "--prompts", "16", "--calibration", str(path), "--json"], what, [path])
    if command == "impact":
        base = next(p for p in seeds["result"] if p.name == "base.json")
        dst, what = mutated("result")
        pair = [str(base), str(dst)] if rng.random() < 0.5 else [str(dst), str(base)]
        return Plan(poly + ["impact", *pair, "--gpu", "h200", "--step", "0", "--json"], what, [dst])
    if command == "results show":
        path, what = mutated("result")
        return Plan(poly + ["results", "show", str(path)] + (["--brief"] if rng.random() < 0.5 else []), what,
                    [path])
    if command == "gate":
        base = next(p for p in seeds["result"] if p.name == "base.json")
        cand = next(p for p in seeds["result"] if p.name == "cand.json")
        if rng.random() < 0.5:
            dst = case / "cand.json"
            what = f"candidate: {mutate_file(rng, cand, dst)}"
            return Plan(poly + ["gate", str(base), str(dst), "--json"], what, [dst])
        dst = case / "base.json"
        what = f"baseline: {mutate_file(rng, base, dst)}"
        return Plan(poly + ["gate", str(dst), str(cand), "--json"], what, [dst])
    if command == "plot":
        path, what = mutated("result")
        out = case / "plots"
        argv = poly + ["plot", str(path), "-o", str(out)]
        if rng.random() < 0.4:
            argv += ["--baseline", str(next(p for p in seeds["result"] if p.name == "base.json"))]
        return Plan(argv, what, [path])
    raise ValueError(command)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# nan / inf as Python and numpy print them; not the word "infinity", which only prose uses (a note
# naming a log's bad value: "response_length/max is minus infinity", seed 19, run 64)
_NONFINITE = re.compile(r"(?<![\w.])-?(?:nan|inf)(?![\w])", re.IGNORECASE)


def _non_finite(text: str) -> str:
    """Where ``text`` shows a NaN or an infinity ("" if nowhere): numbers of JSON output (names
    such as a shape id "-inf" are strings there, not numbers), else nan/inf words of a table."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        m = _NONFINITE.search(text)
        return text[max(0, m.start() - 60): m.end() + 20] if m else ""
    stack = [("", doc)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return f"{where or '<root>'} = {node}"
        if isinstance(node, dict):
            stack += [(f"{where}/{k}", v) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [(f"{where}/{i}", v) for i, v in enumerate(node)]
    return ""


def _where(stderr: str) -> str:
    frames = _FRAME.findall(stderr)
    ours = [(f, ln, fn) for f, ln, fn in frames if str(REPO) in f or "/polytrace/" in f or "/kernels/" in f]
    pick = (ours or frames or [("?", "?", "?")])[-1]
    path = pick[0].replace(str(REPO) + "/", "")
    last = [ln for ln in stderr.strip().splitlines() if ln and not ln.startswith(" ")]
    exc = last[-1].split(":")[0] if last else "?"
    return f"{path}:{pick[1]} ({pick[2]}) {exc}"


def _limit_memory():  # pragma: no cover - runs in the child
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def execute(plan: Plan, command: str, index: int, timeout: float) -> Outcome:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=f"{REPO}:{REPO / '.shim'}:" + os.environ.get("PYTHONPATH", ""))
    start = time.monotonic()
    cwd = plan.inputs[0].parent if plan.inputs else None
    proc = subprocess.Popen(plan.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                            start_new_session=True, preexec_fn=_limit_memory)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Outcome(command, index, "hang", plan.argv, plan.mutation, seconds=time.monotonic() - start)
    secs = time.monotonic() - start
    out_s, err_s = out.decode(errors="replace"), err.decode(errors="replace")
    o = Outcome(command, index, "ok", plan.argv, plan.mutation, seconds=secs)
    if "Traceback (most recent call last)" in err_s:
        o.kind, o.where = "traceback", _where(err_s)
        o.detail = err_s.strip().splitlines()[-1][:200]
        return o
    if proc.returncode == 0 or (command == "gate" and proc.returncode == 1):
        texts = [out_s] + [p.read_text(errors="replace") for p in plan.written if p.is_file()]
        bad = next((b for b in map(_non_finite, texts) if b), "")
        if bad:
            o.kind, o.detail = "non-finite", bad
        elif command == "fit" and plan.written and plan.written[0].is_file():
            check = subprocess.run([sys.executable, "-m", "polytrace", "describe", str(plan.written[0])],
                                   capture_output=True, text=True, env=env, timeout=timeout)
            if check.returncode != 0:
                o.kind, o.detail = "unreadable", check.stderr.strip()[-200:]
        return o
    if proc.returncode == 2 and command == "gate" and not err_s.strip() and out_s.strip():
        o.kind, o.detail = "error", "refused (exit 2, the gate's verdict for unusable input)"
        return o
    if proc.returncode == 2 and err_s.startswith("polytrace: error: ") and err_s.count("\n") == 1:
        o.kind, o.detail = "error", err_s.strip()[:200]
        return o
    o.kind, o.detail = "crash", f"exit {proc.returncode}: {err_s.strip()[-200:]}"
    return o


def _clean(case: Path) -> None:
    """Remove a case folder, FIFOs and symlink loops included."""
    for p in sorted(case.rglob("*"), key=lambda x: len(x.parts), reverse=True) if case.exists() else []:
        try:
            if p.is_symlink() or stat.S_ISFIFO(p.lstat().st_mode) or p.is_file():
                p.unlink()
            elif p.is_dir():
                p.rmdir()
        except OSError:
            pass
    shutil.rmtree(case, ignore_errors=True)


def summarise(outcomes: list[Outcome]) -> str:
    kinds = ["ok", "error", "traceback", "hang", "non-finite", "unreadable", "crash"]
    rows = collections.OrderedDict((c, collections.Counter()) for c in COMMANDS)
    for o in outcomes:
        rows.setdefault(o.command, collections.Counter())[o.kind] += 1
    width = max(len(c) for c in rows)
    lines = [f"{'command':<{width}}  runs  " + "  ".join(f"{k:>10}" for k in kinds)]
    for c, cnt in rows.items():
        if sum(cnt.values()):
            lines.append(f"{c:<{width}}  {sum(cnt.values()):4d}  " + "  ".join(f"{cnt[k]:10d}" for k in kinds))
    total = collections.Counter(o.kind for o in outcomes)
    lines.append(f"{'all':<{width}}  {len(outcomes):4d}  " + "  ".join(f"{total[k]:10d}" for k in kinds))
    bad = [o for o in outcomes if o.kind not in ("ok", "error")]
    if bad:
        lines += ["", "failures by command and place (count, first run index, mutation):"]
        groups: dict[tuple[str, str, str], list[Outcome]] = collections.defaultdict(list)
        for o in bad:
            groups[(o.command, o.kind, o.where or o.detail[:90])].append(o)
        for (c, k, w), os_ in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
            lines.append(f"  {c} {k} x{len(os_)}: {w}  [run {os_[0].index}: {os_[0].mutation[:110]}]")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default=os.environ.get("POLYTRACE_SHARED") or str(REPO.parent / "shared"),
                    help="folder holding polytrace-data/ and validation-logs/ (default $POLYTRACE_SHARED or ../shared)")
    ap.add_argument("--runs", type=int, default=140, help="number of mutated runs (spread over the commands)")
    ap.add_argument("--seed", type=int, default=0, help="random seed; run i of a seed is reproducible alone")
    ap.add_argument("--only", type=int, nargs="*", default=None, help="run only these run indices")
    ap.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated subset of: " + ", ".join(COMMANDS))
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds before a run counts as a hang (default 30)")
    ap.add_argument("--results", nargs="*", default=[], help="extra result JSON files to mutate (e.g. CPU suite runs)")
    ap.add_argument("--keep", default=None, help="folder to keep each failing case's input and command in")
    ap.add_argument("--json", default=None, help="write every outcome to this JSON file")
    args = ap.parse_args(argv)
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        ap.error(f"unknown command(s) {unknown}; choose from {', '.join(COMMANDS)}")
    shared = Path(args.shared)
    if not (shared / "polytrace-data").is_dir():
        ap.error(f"--shared {shared}: no polytrace-data/ there")
    work = Path(tempfile.mkdtemp(prefix="polytrace-fuzz-"))
    outcomes: list[Outcome] = []
    try:
        seeds = build_seeds(shared, work, [Path(p) for p in args.results])
        indices = args.only if args.only is not None else range(args.runs)
        started = time.monotonic()
        for i in indices:
            command = commands[i % len(commands)]
            rng = random.Random(args.seed * 1_000_003 + i)
            case = work / "cases" / f"{i:05d}"
            plan = plan_run(rng, command, seeds, case)
            o = execute(plan, command, i, args.timeout)
            outcomes.append(o)
            if o.kind not in ("ok", "error"):
                print(f"[{i}] {command}: {o.kind} {o.where or o.detail[:120]} | {o.mutation[:120]}", flush=True)
                if args.keep:
                    dst = Path(args.keep) / f"{args.seed}_{i:05d}_{command.replace(' ', '_')}"
                    shutil.rmtree(dst, ignore_errors=True)
                    for p in plan.inputs:
                        if p.is_dir():
                            shutil.copytree(p, dst / p.name, symlinks=True, ignore_dangling_symlinks=True,
                                            copy_function=_copy_regular)
                        elif p.is_file():
                            dst.mkdir(parents=True, exist_ok=True)
                            shutil.copy(p, dst / p.name)
                    dst.mkdir(parents=True, exist_ok=True)
                    (dst / "command.txt").write_text(" ".join(plan.argv) + f"\n# {o.mutation}\n# {o.detail}\n")
            _clean(case)
        print(f"\n{len(outcomes)} runs in {time.monotonic() - started:.0f} s (seed {args.seed}, timeout "
              f"{args.timeout:.0f} s, memory limit {MEMORY_LIMIT >> 30} GiB)\n")
        print(summarise(outcomes))
        if args.json:
            Path(args.json).write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    finally:
        _clean(work)
    return 1 if any(o.kind not in ("ok", "error") for o in outcomes) else 0


def _copy_regular(src, dst):
    if stat.S_ISFIFO(os.lstat(src).st_mode):
        os.mkfifo(dst)
    else:
        shutil.copy2(src, dst)


if __name__ == "__main__":
    sys.exit(main())
