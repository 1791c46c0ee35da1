"""``polytrace bench`` without Ray: the shard plan, serial runs into a run folder (the same files a
Ray run writes), resume after Ctrl-C, failing shards, the merge alone, and bad input. The suites
here are the tiny fakes of ``_bench_fakes`` (milliseconds per case, no torch)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _bench_fakes import merged_ids, plain_pytest_ids, run_counts, shard_records, write_suites

from polytrace.errors import PolytraceError
from polytrace.measure.bench import ledger, merge_dir, run_bench
from polytrace.measure.bench.cluster import ClusterSpec
from polytrace.measure.bench.run import BenchCases, ShardPlan

ROOT = Path(__file__).resolve().parents[2]
ALPHA = ["a0", "a1", "a2", "a3", "a4", "fail"]
BETA = ["b0", "b1", "ctrl-c", "b3"]


@pytest.fixture
def suites(tmp_path):
    return write_suites(tmp_path / "suites", {"alpha": ALPHA, "beta": BETA})


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """One finished run of a1, a2 and b0 in shards of two (two shard records, both suites merged),
    for the merge alone (which deletes a merged file and asserts the merge writes the same bytes back)
    and the damaged records (which edit a copy): one collection and two shard pytest processes for
    the module, not one run per test."""
    root = tmp_path_factory.mktemp("small_run")
    suites = write_suites(root / "suites", {"alpha": ALPHA, "beta": BETA})
    report = run_bench(root / "run", cases=BenchCases(k="a1 or a2 or b0", suites_dir=suites),
                       shards=ShardPlan(max_cases=2))
    assert report.exit_code == 0 and len(report.records) == 2, report.problems
    return root / "run"


@pytest.fixture
def child_env(monkeypatch):
    """What a CLI child needs: the checkout on the path (the shim stands in for the install)."""
    env = dict(os.environ)
    shim = ROOT / ".shim"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(shim)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for key in [k for k in env if k.startswith("POLYTRACE_FAKE_")]:
        env.pop(key)
    return env


def _sigint_as_in_a_terminal() -> None:
    """SIGINT at its default in the child, as a terminal's Ctrl-C finds it: a test run started in
    the background (``cmd &`` in a script, nohup) inherits SIGINT ignored, and Python keeps an
    ignored SIGINT ignored, so the fake Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polytrace", "bench", "--allow-cpu", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180, preexec_fn=_sigint_as_in_a_terminal, **kw)


def test_shards_deal_every_case_once_in_multiples_of_the_workers():
    cases = [ledger.Case(f"t.py::c[{i}]", i) for i in range(23)]
    for slots, max_cases in ((1, 64), (2, 64), (2, 5), (3, 4), (8, 64)):
        shards = ledger.make_shards(cases, slots, run=4, max_cases=max_cases)
        dealt = [c for s in shards for c in s.cases]
        assert sorted(c.index for c in dealt) == list(range(23))  # each case exactly once
        assert all(len(s.cases) <= max_cases for s in shards)
        assert len(shards) % slots == 0 or len(shards) == len(cases)
        assert all(s.id.startswith("s4-") for s in shards)
    # dealt round robin: neighbouring cases (same kernel, same provider) land in different shards
    two = ledger.make_shards(cases, 2, run=1)
    assert [c.index for c in two[0].cases][:3] == [0, 2, 4] and [c.index for c in two[1].cases][:3] == [1, 3, 5]
    assert ledger.make_shards([], 4, run=1) == []


def test_recorded_times_balance_the_shards_longest_first():
    """With the times of an earlier run, LPT: here round robin would put both 10 s cases (0 and 2)
    in one shard; balanced, each shard gets one and the loads are 11 and 11."""
    cases = [ledger.Case(f"t.py::c[{i}]", i) for i in range(4)]
    seconds = {"t.py::c[0]": 10.0, "t.py::c[1]": 1.0, "t.py::c[2]": 10.0, "t.py::c[3]": 1.0}
    naive = ledger.make_shards(cases, 2, run=1)
    assert [c.index for c in naive[0].cases] == [0, 2]
    shards = ledger.make_shards(cases, 2, run=1, seconds=seconds)
    assert sorted(sum(seconds[c.nodeid] for c in s.cases) for s in shards) == [11.0, 11.0]
    assert all([c.index for c in s.cases] == sorted(c.index for c in s.cases) for s in shards)  # collection order
    # a case without a recorded time counts as the median; every case still lands exactly once
    more = cases + [ledger.Case("t.py::new", 4)]
    dealt = ledger.make_shards(more, 2, run=1, seconds=seconds, max_cases=3)
    assert sorted(c.index for s in dealt for c in s.cases) == [0, 1, 2, 3, 4]
    assert all(len(s.cases) <= 3 for s in dealt)


def test_budget_skips_are_not_finished_but_other_skips_are():
    assert ledger.is_done({"outcome": "passed"}) and ledger.is_done({"outcome": "skipped", "reason": "needs a GPU"})
    assert not ledger.is_done({"outcome": "skipped", "reason": "time budget POLYTRACE_BENCH_BUDGET_S=5 s spent"})
    assert not ledger.is_done({"outcome": "failed"}) and not ledger.is_done({"outcome": "not-run"})
    assert not ledger.is_done({"outcome": "passed", "complete": False})  # interrupted mid-call


def test_serial_run_writes_the_ids_and_order_of_plain_pytest(suites, tmp_path, child_env):
    """Shards of two cases each, merged: per suite, exactly the benchmark ids of one plain
    `pytest --benchmark-json` run, in its order, readable by the results store."""
    out = tmp_path / "run"
    report = run_bench(out, cases=BenchCases(k="not fail and not ctrl", suites_dir=suites,
                                             pytest_args=["--benchmark-disable-gc"]),
                       shards=ShardPlan(max_cases=4))  # 4+4+2 cases
    assert report.exit_code == 0 and report.problems == [] and report.pending == 0
    records = shard_records(out)
    assert len(records) == len(report.records) == 3  # 10 cases in shards of at most 4
    assert all(r["polytrace_shard"]["status"] == "done" for r in records)
    plain = plain_pytest_ids(suites, "not fail and not ctrl", tmp_path, child_env)
    assert sorted(plain) == ["alpha", "beta"]
    for suite in ("alpha", "beta"):
        path = out / "cpu" / f"{suite}.json"
        assert merged_ids(path) == plain[suite]
        merged = json.loads(path.read_text())
        assert merged["machine_info"]["polytrace"]["gpu_slug"] == "cpu"
        assert merged["polytrace_bench"]["nodes"][0]["machine_info"]["polytrace"]["gpu_slug"] == "cpu"
        assert set(merged) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
        assert all(b["options"]["disable_gc"] for b in merged["benchmarks"])  # --pytest-arg reached every shard
    from polytrace.measure.results import load_result, store_result

    stored = store_result(out / "cpu" / "alpha.json", tmp_path / "store", allow_cpu=True)
    assert stored.parent.name == "cpu" and stored.name.endswith("_alpha.json")
    assert len(load_result(out / "cpu").benchmarks) == 8  # the folder reads as one run (the gate's input)


def test_ctrl_c_keeps_finished_shards_and_a_rerun_runs_only_the_rest(suites, tmp_path, child_env):
    """Ctrl-C (SIGINT to the process group) in the middle of the run: exit 130, every finished
    shard readable; the rerun skips them and runs each remaining case once."""
    out, runlog = tmp_path / "run", tmp_path / "runlog.txt"
    env = {**child_env, "POLYTRACE_FAKE_CTRL_C": str(tmp_path / "ctrl-c.marker"), "POLYTRACE_FAKE_RUNLOG": str(runlog)}
    args = ["--suites-dir", str(suites), "-o", str(out), "--shard-size", "4", "-k", "not fail"]
    first = _cli(args, env, start_new_session=True)
    assert first.returncode == 130, first.stderr
    assert "rerun the same command to resume" in first.stdout
    finished = shard_records(out)
    assert finished, "no shard record survived the interrupt"
    before = {c["nodeid"] for r in finished for c in r["polytrace_shard"]["cases"] if ledger.is_done(c)}
    assert before and not any("ctrl-c" in n for n in before)
    assert not (out / "cpu").exists()  # nothing merged from a cut run until asked
    second = _cli(args, env)
    assert second.returncode == 0, second.stderr
    assert f"{len(before)} finished by earlier runs" in second.stdout
    counts = run_counts(runlog)
    assert counts["test_beta.py::test_case[ctrl-c]"] == 2  # cut mid-call, so measured on the rerun
    assert all(n == 1 for nodeid, n in counts.items() if "ctrl-c" not in nodeid), counts
    assert merged_ids(out / "cpu" / "beta.json") == [f"beta/k/ours/fwd/{c}" for c in BETA]
    assert len(merged_ids(out / "cpu" / "alpha.json")) == len(ALPHA) - 1


def test_a_failing_shard_is_one_line_and_the_others_are_kept(suites, tmp_path, capfd, monkeypatch):
    """The CLI in this process (the shards are still their own pytest processes; a real CLI process is
    what the Ctrl-C test needs, not this one): capfd reads file descriptor 2, so a shard's traceback
    written there would be seen as it was in the CLI child's stderr."""
    from polytrace.cli import main

    out = tmp_path / "run"
    for key in [k for k in os.environ if k.startswith("POLYTRACE_FAKE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("POLYTRACE_FAKE_FAIL", "1")
    args = ["bench", "--allow-cpu", "--suites-dir", str(suites), "--suite", "alpha", "-o", str(out),
            "--shard-size", "3", "-q"]
    code = main(args)
    stdout, stderr = capfd.readouterr()
    assert code == 1
    errors = [ln for ln in stderr.splitlines() if ln.startswith("polytrace: error:")]
    assert len(errors) == 1, stderr
    assert "shard s1-" in errors[0] and " on " in errors[0] and "test_alpha.py::test_case[fail]" in errors[0]
    assert "planted failure" in errors[0] and "Traceback" not in stderr
    assert merged_ids(out / "cpu" / "alpha.json") == [f"alpha/k/ours/fwd/{c}" for c in ALPHA if c != "fail"]
    # the rerun retries only the failed case; fixed, the run completes
    monkeypatch.setenv("POLYTRACE_FAKE_FAIL", "")
    code = main(args)
    stdout, stderr = capfd.readouterr()
    assert code == 0, stderr
    assert f"{len(ALPHA)} finished by earlier runs" in stdout  # 5 benchmarks + the plain test
    assert merged_ids(out / "cpu" / "alpha.json") == [f"alpha/k/ours/fwd/{c}" for c in ALPHA]


def test_merge_alone_rewrites_the_merged_files(small_run):
    """In the shared run itself, not a copy (a merged file names its shard records by path): the
    merge alone writes back the very bytes it deleted, which the last line asserts."""
    out = small_run
    assert ledger.recorded_seconds(out).keys() == {"test_alpha.py::test_case[a1]", "test_alpha.py::test_case[a2]",
                                                   "test_beta.py::test_case[b0]"}
    before = (out / "cpu" / "alpha.json").read_text()
    (out / "cpu" / "alpha.json").unlink()
    written = merge_dir(out)
    assert sorted(m.suite for m in written) == ["alpha", "beta"]
    assert (out / "cpu" / "alpha.json").read_text() == before


DAMAGE = [
    (lambda r: r.__setitem__("machine_info", True), "'machine_info' must be an object"),
    (lambda r: r["benchmarks"].__setitem__(0, "x"), r"benchmarks\[0\] must be an object"),
    (lambda r: r["benchmarks"][0].__setitem__("extra_info", float("nan")), "'extra_info' must be an object"),
    (lambda r: r["polytrace_shard"]["cases"].__setitem__(0, [1]), r"polytrace_shard.cases\[0\] is not a case"),
    (lambda r: r["polytrace_shard"]["cases"][0].__setitem__("index", "0"), r"cases\[0\] is not a case"),
    (lambda r: r["polytrace_shard"]["cases"][0].__setitem__("seconds", float("inf")), r"cases\[0\] is not"),
    (lambda r: r["polytrace_shard"].__setitem__("id", None), "polytrace_shard.id, node_label and target"),
]


def test_a_damaged_shard_record_is_one_line_naming_it(small_run, tmp_path, capsys):
    """A run folder outlives its run (hand edits, cut copies): a fuzz of shard records found
    five tracebacks in ``bench --merge``; every damaged field is now refused, naming the file."""
    from polytrace.cli import main

    good = shutil.copytree(small_run, tmp_path / "run")
    for i, (edit, message) in enumerate(DAMAGE):
        out = shutil.copytree(good, tmp_path / f"damaged{i}")
        path = sorted((out / "shards").glob("*.json"))[0]
        rec = json.loads(path.read_text())
        edit(rec)
        path.write_text(json.dumps(rec))
        assert main(["bench", "--merge", str(out), "--allow-cpu"]) == 2, message
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"polytrace: error: {path}") and "\n" not in err, err
        assert re.search(message, err), err
    assert main(["bench", "--merge", str(good), "--allow-cpu"]) == 0  # the undamaged folder still merges


def test_gpu_models_never_share_a_file_and_other_code_is_refused(suites, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setenv("POLYTRACE_FAKE_SLUG", "h100")
    run_bench(out, cases=BenchCases(k="a0 or a1", suites_dir=suites))
    monkeypatch.setenv("POLYTRACE_FAKE_SLUG", "h200")
    run_bench(out, cases=BenchCases(k="a2", suites_dir=suites))
    assert merged_ids(out / "h100" / "alpha.json") == ["alpha/k/ours/fwd/a0", "alpha/k/ours/fwd/a1"]
    assert merged_ids(out / "h200" / "alpha.json") == ["alpha/k/ours/fwd/a2"]
    # a shard from other code in the folder: the merge refuses to mix them, naming both shards
    path = sorted((out / "shards").glob("*.json"))[0]
    rec = json.loads(path.read_text())
    rec["machine_info"]["polytrace"]["suite_hash"] = "other"
    rec["benchmarks"] = [dict(b, fullname="test_alpha.py::test_case[zz]",
                              extra_info={**b["extra_info"], "shape_id": "zz"}) for b in rec["benchmarks"][:1]]
    rec["polytrace_shard"]["cases"] = []
    other = path.with_name("s9-0.json")
    other.write_text(json.dumps(rec))
    with pytest.raises(PolytraceError, match=r"s9-0\.json: suite_hash 'other' differs from .*s1-0\.json"):
        merge_dir(out)
    # resuming with another commit is refused before anything runs
    monkeypatch.setenv("POLYTRACE_COMMIT", "0123456789ab")
    with pytest.raises(PolytraceError, match="holds shards of commit .* this checkout is 0123456789ab"):
        run_bench(out, cases=BenchCases(suites_dir=suites))


def test_a_spent_budget_leaves_cases_pending_for_the_rerun(suites, tmp_path):
    out = tmp_path / "run"
    report = run_bench(out, cases=BenchCases(k="b0", suites_dir=suites), budget_s=1e-6)
    assert report.pending == 1 and report.exit_code == 1
    assert shard_records(out)[0]["polytrace_shard"]["status"] == "not-started"
    report = run_bench(out, cases=BenchCases(k="b0", suites_dir=suites))
    assert report.pending == 0 and report.exit_code == 0 and report.finished_before == 0


@pytest.mark.parametrize("args, message", [
    (["--suite", "nope", "-o", "{tmp}/o"], "--suite: no suite 'nope'"),
    (["-o", "{tmp}/file.txt"], "-o {tmp}/file.txt: exists and is not a folder"),
    (["--merge", "{tmp}/empty"], "no shard records"),
    (["--merge", "{tmp}/missing"], "run folder not found"),
    (["-o", "{tmp}/o", "-k", "no_such_case"], "no cases collected"),
    (["-o", "{tmp}/o", "--workers", "2"], "--workers: only with --ray"),
    ([], "-o DIR: required"),
    (["-o", "{tmp}/o", "--ray", "127.0.0.1:1"], "--ray 127.0.0.1:1: cannot reach the Ray head"),
    (["-o", "{tmp}/o", "--ray", "nohost"], "expected auto, local, HOST:PORT"),
    (["-o", "{tmp}/o", "--budget-s", "-1"], "--budget-s: must be > 0"),
    (["-o", "{tmp}/o", "--shard-size", "0"], "--shard-size"),
    (["-o", "{tmp}/o", "--balance-from", "{tmp}/empty"], "--balance-from {tmp}/empty: no shard records"),
])
def test_bad_input_is_one_line(args, message, suites, tmp_path, capsys):
    from polytrace.cli import main

    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    try:
        code = main(["bench", "--suites-dir", str(suites), "-q", "--allow-cpu", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("polytrace: error:"), err
    assert message.replace("{tmp}", str(tmp_path)) in err
    assert not (tmp_path / "o").exists()  # a refused run leaves no empty run folder behind


def test_a_suite_that_cannot_be_collected_is_one_line(tmp_path, capsys):
    from polytrace.cli import main

    suites = write_suites(tmp_path / "suites", {"alpha": ["a0"]})
    (suites / "test_broken.py").write_text("def test_x(:\n")
    code = main(["bench", "--suites-dir", str(suites), "-o", str(tmp_path / "o"), "-q", "--allow-cpu"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "polytrace: error: collecting " in err and "test_broken.py: SyntaxError" in err


def test_without_ray_installed_ray_says_how_to_install(suites, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(PolytraceError, match=r"Ray is not installed; pip install 'polytrace\[cluster\]'"):
        run_bench(tmp_path / "o", cases=BenchCases(suites_dir=suites),
                  cluster=ClusterSpec(address="local", allow_cpu=True))



def test_the_suites_cost_hints_reach_the_dealing(tmp_path):
    """Before any run, the collection carries each registry case's cost hint (in the interpreter
    our kernels take seconds, torch milliseconds), so the shards are dealt by it, not round robin
    (on the CPU attention + logprob suites round robin put 7.4 s and 5.2 s of cases in two shards;
    the hints give 6.3 s and 7.0 s)."""
    from polytrace.measure.bench import worker

    spec = {"repo": str(ROOT), "files": ["suites/test_logprob.py"], "env": {}, "k": "token_logprobs and not linear"}
    collected = worker.collect(spec)
    assert collected["nodeids"] and collected["costs"]
    costs = {n.split("[", 1)[1].split("-dapo")[0]: c for n, c in collected["costs"].items()}
    assert costs["token_logprobs-ours-fwd"] == 1.0 and costs["token_logprobs-ours-fwd+bwd"] == 2.0
    assert costs["token_logprobs-torch-eager-fwd"] < 0.1 * costs["token_logprobs-ours-fwd"]
    cases = [ledger.Case(n, i) for i, n in enumerate(collected["nodeids"])]
    shards = ledger.make_shards(cases, 2, run=1, seconds=collected["costs"])
    loads = sorted(sum(collected["costs"].get(c.nodeid, 0.0) for c in s.cases) for s in shards)
    assert loads[1] - loads[0] <= 1.0  # fwd (1) and fwd+bwd (2) of ours never land in one shard with the rest
