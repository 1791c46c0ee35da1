"""``polytrace ab`` end to end on the CPU (Triton interpreter, ``--allow-cpu``, the suites' tiny shapes), in
a throwaway git repository holding a copy of this checkout's kernels/ and suites/ (``_ab_repo``):

- a kernel made to do its work twice between two commits: exit 1, named (-o files written);
- the planner made to repeat its search: exit 1, named;
- a no-op commit: exit 0;
- a kernel whose output changed: exit 1 under "outputs changed", not timed;
- the working tree as CAND (uncommitted changes timed), HEAD with a dirty tree refused;
- suites that differ, revisions that do not exist or do not import, unknown suites, too few
  rounds, no GPU without --allow-cpu: one-line errors or notes, exit 2 for errors;
- temporary worktrees removed after every run, an error, Ctrl-C and SIGTERM.

Rounds: 16 pairs where a 2x slowdown is to be found, 12 elsewhere (the minimum at alpha 0.002 is
10). A 2x slowdown of a ~30-50 ms interpreter launch is far outside the noise of a shared 2-core
machine, but a pair whose BASE launch was preempted can flip: with 12 pairs a flipped pair of
rank 3 or more already lifts p above 0.002, with 16 pairs ranks up to 11 are tolerated.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _ab_repo import commit, edit, git, make_repo, plant_noop, plant_pack_twice, plant_planner_twice

from polytrace.cli import main
from polytrace.errors import PolytraceError
from polytrace.measure.ab import loader, revisions, runner

pytestmark = pytest.mark.skipif(shutil.which("git") is None,
                                reason="git is not installed (polytrace ab compares git revisions)")
PACK = ["--suite", "packing", "-k", "pack and not unpack and r1m0"]
PLAN = ["--suite", "packing", "-k", "plan_microbatches and search"]
ROUNDS = ["--rounds", "12"]  # where nothing is to be found (A/A, listing, outputs)
# A 2x slowdown. At --alpha 0.002 the exact signed-rank test of 16 pairs fails on one pair whose BASE
# round was preempted past 2x (p = 0.005, seen once in a full suite run on a loaded CPU); 32 pairs
# keep p < 0.002 with three such pairs at the top ranks (p = 0.0009).
DETECT = ["--rounds", "32"]
PACK_ID = "packing/pack/ours/fwd/mb=dapo-math-32b/s0/r1m0"
PLAN_ID = "packing/plan_microbatches/ours/plan/profile=search-r1-7b"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """Tags: base; noop (a comment, a tuned-config file and a result file); slowpack (noop + pack
    twice); slowplan (noop + planner twice); wrongpack (noop + pack writes one wrong element);
    fewer (noop + the search-r1 pack shapes dropped from the suite); broken (noop + a planner
    that does not import)."""
    path = make_repo(tmp_path_factory.mktemp("ab") / "repo")
    for rel in ("results/tuning/cpu/pack.json", "results/cpu/run.json"):  # tuned configs travel, results do not
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text("{}\n")
    plant_noop(path)
    commit(path, "a comment")
    git(path, "tag", "noop")
    for tag, plant in (("slowpack", plant_pack_twice), ("slowplan", plant_planner_twice), ("wrongpack", _plant_wrong),
                       ("fewer", _plant_fewer_shapes), ("broken", _plant_broken)):
        git(path, "checkout", "--quiet", "--detach", "noop")
        plant(path)
        commit(path, tag)
        git(path, "tag", tag)
    git(path, "checkout", "--quiet", "main")
    return path


def _plant_wrong(repo: Path) -> None:
    edit(repo, "kernels/packing/api.py", "\ndef pack(", "\ndef _pack_right(")
    with open(repo / "kernels/packing/api.py", "a") as fh:
        fh.write("\n\ndef pack(*args, **kwargs):\n    packed, cu, max_len = _pack_right(*args, **kwargs)\n"
                 "    packed.view(-1)[0] += 1  # planted: one wrong element\n    return packed, cu, max_len\n")


def _plant_fewer_shapes(repo: Path) -> None:
    edit(repo, "suites/packing_cases.py", 'PACK_PROFILES = ("dapo-math-32b", "search-r1-7b")',
         'PACK_PROFILES = ("dapo-math-32b",)')


def _plant_broken(repo: Path) -> None:
    with open(repo / "kernels/packing/planner.py", "a") as fh:
        fh.write("\ndef broken(:\n")


@pytest.fixture(autouse=True)
def own_tempdir(tmp_path, monkeypatch):
    """A private temporary folder, so a left-over worktree folder of this test is seen."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def ab(capsys, repo: Path, *args: str) -> tuple[int, str, str]:
    code = main(["ab", "--repo", str(repo), "--allow-cpu", *args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean(repo: Path, tmp: Path) -> None:
    """No worktree registered but the repository's own, no temporary folder left, nothing of the
    two revisions left imported, the interpreter switch as it was."""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not list(tmp.iterdir())
    assert not [m for m in sys.modules if m.startswith("_polytrace_ab_")]
    assert not [f for f in sys.meta_path if type(f).__name__ == "_RevisionFinder"]
    assert os.environ.get("TRITON_INTERPRET") == "1"  # tests/conftest.py's, restored


def test_a_kernel_doing_its_work_twice_fails_and_is_named(capsys, repo, own_tempdir, tmp_path):
    code, out, err = ab(capsys, repo, "noop", "slowpack", *PACK, *DETECT, "--markdown", "-o", str(tmp_path / "o"))
    assert code == 1, out + err
    assert out.startswith("### polytrace ab: **FAIL** (1 regression, 1 weighted-mean regression)")
    regressions = out[out.index("#### Regressions (1)"):out.index("#### Weighted")]
    assert PACK_ID in regressions and "| identical |" in regressions
    assert "**step time on dapo-math-32b" in out.splitlines()[2]  # the step-cost line right under the verdict
    report = json.loads((tmp_path / "o" / "ab.json").read_text())
    (case,) = report["cases"]
    assert 0.5 < case["change"] < 3.0 and case["pairs"] == int(DETECT[1]) and len(case["first"]) == int(DETECT[1])
    assert case["timing"]["timing"] == "host-cpu"  # the interpreter's rounds: process CPU time
    assert report["base"]["spec"] == "noop" and report["cand"]["kernel_hashes"]["packing"] != \
        report["base"]["kernel_hashes"]["packing"]
    from polytrace.measure.results import load_result

    base, cand = load_result(tmp_path / "o" / "base.json"), load_result(tmp_path / "o" / "cand.json")
    assert [b.id for b in base.benchmarks] == [b.id for b in cand.benchmarks] == [case["id"]]
    assert base.benchmarks[0].rounds.tolist() == case["base_rounds"] and base.measured_on == "cpu-interpreter"
    assert (tmp_path / "o" / "ab.md").read_text().strip() == out.strip()
    assert_clean(repo, own_tempdir)


def test_the_planner_searching_twice_fails(capsys, repo, own_tempdir):
    """One run of 32 pairs. Five repeated runs were a reliability figure, not a check a planted bug
    could pass: the pair order is seeded alike in every run, so the runs differed only in noise.
    The planted search twice, timed in CPU seconds, flips no pair (3 runs on the 2-core CPU machine
    under load 3-4: smallest CAND/BASE ratio 1.13, p = 4.7e-10 each)."""
    code, out, err = ab(capsys, repo, "noop", "slowplan", *PLAN, *DETECT, "--json")
    assert code == 1, out + err
    report = json.loads(out)
    assert [c["status"] for c in report["cases"]] == ["regression"] and report["verdict"].startswith("FAIL")
    (case,) = report["cases"]
    assert case["id"].startswith(PLAN_ID) and case["outputs"] == "identical"
    assert 0.5 < case["change"] < 3.0 and case["p_value"] < 0.002, case
    assert case["pairs"] == int(DETECT[1]) and case["timing"]["timing"] == "host-cpu"
    assert_clean(repo, own_tempdir)


def test_a_no_op_commit_never_fails(capsys, repo, own_tempdir):
    """12 pairs of interpreter launches on a shared CPU: the interval is wide (+-25% is common), so
    the honest verdict is unchanged (exit 0) or inconclusive (exit 3), never a regression."""
    code, out, err = ab(capsys, repo, "base", "noop", "--suite", "packing", "-k",
                        "(pack and not unpack and r1m0) or (plan_microbatches and search)", *ROUNDS, "--all",
                        "--json")
    assert code in (0, 3), out + err
    report = json.loads(out)
    assert report["verdict"].startswith("PASS" if code == 0 else "INCONCLUSIVE")
    assert {c["status"] for c in report["cases"]} <= {"unchanged", "inconclusive"} and len(report["cases"]) == 2
    assert all(c["outputs"] == "identical" for c in report["cases"])
    assert "kernel source changed in: packing" in report["notes"]
    for c in report["cases"]:  # an undecided case says how many pairs would decide it
        assert (c["pairs_to_decide"] is None) == (c["status"] == "unchanged")
    assert_clean(repo, own_tempdir)


def test_a_changed_output_is_flagged_and_not_timed(capsys, repo, own_tempdir):
    code, out, err = ab(capsys, repo, "noop", "wrongpack", *PACK, *ROUNDS, "--markdown")
    assert code == 1, out + err
    assert out.startswith("### polytrace ab: **FAIL** (1 case with changed outputs)")
    section = out[out.index("#### Outputs changed"):]
    assert PACK_ID in section and r"packed: max \|err\| 1 > bound 0" in section and "| changed " in section
    assert "#### Regressions" not in out
    assert_clean(repo, own_tempdir)


def test_until_decided_stops_a_2x_slowdown_before_its_maximum(capsys, repo, own_tempdir):
    """Looks at 12, 24, 48 and 64 pairs (alpha 0.002 split over 4 looks: 0.0005 each, which the
    exact test reaches from 12 pairs); a 2x slowdown is decided at an early look: exit 1."""
    code, out, err = ab(capsys, repo, "noop", "slowpack", *PACK, "--until-decided", "--max-pairs", "64", "--json")
    assert code == 1, out + err
    report = json.loads(out)
    seq = report["sequential"]
    assert seq["looks"] == [12, 24, 48, 64] and seq["alpha_per_look"] == pytest.approx(0.0005)
    (case,) = report["cases"]
    assert case["status"] == "regression" and case["p_value"] < 0.0005 and 0.5 < case["change"] < 3.0
    assert case["pairs"] < 64 and case["looks"] == seq["looks"][:len(case["looks"])]
    assert case["pairs"] == case["looks"][-1] == len(case["base_rounds"])
    assert report["verdict"].startswith("FAIL: 1 regression")
    assert_clean(repo, own_tempdir)


def test_until_decided_on_a_no_op_never_alarms(capsys, repo, own_tempdir):
    """One A/A-like run (a comment changed) of two cases: each case ends unchanged or inconclusive
    (exit 0 or 3), never a regression; an undecided case ran to its last look. (Three runs were a
    false-alarm figure, not a check: each run's false alarm is bounded by alpha = 0.002, the
    sequential split's rate is measured on simulated pairs in test_ab_sequential.py and the split
    to the last judgement in test_ab_alpha_split.py.)"""
    code, out, err = ab(capsys, repo, "base", "noop", "--suite", "packing", "-k",
                        "(pack and not unpack and r1m0) or (plan_microbatches and search)", "--until-decided",
                        "--max-pairs", "48", "--json")
    assert code in (0, 3), out + err
    report = json.loads(out)
    assert report["sequential"]["looks"] == [12, 24, 48] and len(report["cases"]) == 2
    for c in report["cases"]:
        assert c["status"] in ("unchanged", "inconclusive"), c
        assert c["pairs"] == 48 if c["status"] == "inconclusive" else c["pairs"] in (12, 24, 48)
        assert c["pairs"] == len(c["base_rounds"]) == len(c["first"]) and c["looks"][-1] == c["pairs"]
        if c["status"] == "inconclusive":
            assert c["note"].startswith("undecided at --max-pairs 48")
    assert_clean(repo, own_tempdir)


def test_cases_in_one_revision_only_are_listed_not_compared(capsys, repo, own_tempdir):
    code, out, err = ab(capsys, repo, "noop", "fewer", "--suite", "packing", "-k",
                        "pack and not unpack and (r1m0 or r0m17)", *ROUNDS, "--all")
    assert code in (0, 3), out + err  # unchanged or, with 12 noisy CPU pairs, inconclusive
    assert "1 case(s) only in CAND, 1 only in BASE" not in out
    assert "0 case(s) only in CAND, 1 only in BASE (listed, not compared)" in out
    listed = out[out.index("only in BASE (not compared):"):]
    assert "mb=search-r1-7b/s0/r0m17" in listed and ("counts: unchanged 1" in out or "counts: inconclusive 1" in out)
    assert_clean(repo, own_tempdir)


def test_the_working_tree_is_the_default_candidate_and_a_dirty_head_is_refused(capsys, repo, own_tempdir,
                                                                             tmp_path):
    clone = tmp_path / "clone"
    git(repo, "worktree", "add", "--quiet", "--detach", str(clone), "noop")
    try:
        plant_pack_twice(clone)  # uncommitted
        code, out, err = ab(capsys, clone, "HEAD", "HEAD", *PACK, *ROUNDS)
        assert code == 2 and out == ""
        assert err.startswith("polytrace: error: CAND 'HEAD' is HEAD, but the working tree has uncommitted changes "
                              "under kernels/, suites/ or results/tuning/ (kernels/packing/api.py)")
        assert err.count("\n") == 1
        assert "commit them, or omit CAND" in err
        code, out, err = ab(capsys, clone, "HEAD", *PACK, *DETECT)
        assert code == 1, out + err
        assert "vs  CAND working tree (" in out and "-dirty)" in out and PACK_ID in out, out
    finally:
        git(repo, "worktree", "remove", "--force", str(clone))
    assert_clean(repo, own_tempdir)


@pytest.mark.parametrize("args, message", [
    (["nope", "noop"], "BASE 'nope': no such revision in"),
    (["noop", "--", "--bad"], "CAND '--bad': not a revision"),
    (["noop", "slowpack", "--suite", "nosuch"], "--suite 'nosuch': no such suite in CAND; suites: logprob, "),
    (["noop", "slowpack", "--suite", "packing", "-k", "nothing_matches_this"],
     "no case of our providers matching -k 'nothing_matches_this' in suite(s) packing"),
    (["noop", "broken", *PLAN], "CAND: suite 'packing' fails to list its cases: SyntaxError"),
    (["noop", "slowpack", "--rounds", "9"], "--rounds 9: a paired signed-rank test on 9 pairs cannot reach "
                                            "p < 0.002 (smallest p 0.00391); use at least 10"),
    (["noop", "slowpack", "--until-decided", "--rounds", "12"], "--rounds and --until-decided: a sequential run "
                                                                 "chooses its pairs per case"),
    (["noop", "slowpack", "--until-decided", "--max-pairs", "8"], "--max-pairs 8: the first look needs 10 pairs"),
    (["noop", "slowpack", "--max-pairs", "20"], "--max-pairs needs --until-decided"),
    (["noop", "slowpack", "--budget-s", "60"], "--budget-s needs --until-decided"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_left_behind(capsys, repo, own_tempdir, args, message):
    code, out, err = ab(capsys, repo, *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"polytrace: error: {message}"), err
    assert_clean(repo, own_tempdir)


def test_cli_usage_errors(capsys, repo):
    for args, message in ((["--threshold", "5"], "would be 500%; did you mean 5%?"),
                          (["--json", "--markdown"], "not allowed with argument"),
                          (["--rounds", "0"], "expected a positive integer"),
                          (["--budget-s", "0"], "must be positive seconds"),
                          (["--max-pairs", "0"], "expected a positive integer")):
        with pytest.raises(SystemExit) as exc:
            main(["ab", "noop", *args, "--repo", str(repo)])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_no_gpu_is_refused_without_force(capsys, repo, own_tempdir):
    code = main(["ab", "noop", "slowpack", "--repo", str(repo)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("polytrace: error: no CUDA GPU:") and "--allow-cpu runs it anyway" in err
    assert_clean(repo, own_tempdir)


def test_ctrl_c_and_sigterm_remove_the_worktrees(capsys, repo, own_tempdir, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.measure, "run_pair", interrupted)
    code, out, err = ab(capsys, repo, "noop", "slowpack", *PACK, *ROUNDS)
    assert code == 130 and "interrupted" in err
    assert_clean(repo, own_tempdir)
    with pytest.raises(revisions.Terminated):
        with revisions.checked_out(repo, "noop", "slowpack") as (base, cand):
            assert base.root.is_dir() and cand.root.is_dir()
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))
    assert_clean(repo, own_tempdir)


def test_each_revision_imports_its_own_kernels_and_caches_no_bytecode(repo, own_tempdir):
    with revisions.checked_out(repo, "noop", "slowplan") as (base, cand), \
            loader.loaded({"BASE": base.root, "CAND": cand.root}) as revs:
        cases = {label: rev.registry.suite_cases("packing") for label, rev in revs.items()}
        spec = sys.modules["_polytrace_ab_cand_suites.packing_cases"].packing_spec
        assert spec.__name__ == "_polytrace_ab_cand.packing.spec"  # `polytrace_kernels` read as CAND's
        assert revs["BASE"].registry.DEFAULT_KERNELS == "_polytrace_ab_base"
        plan_b = revs["BASE"].registry.family_module(revs["BASE"].kernels, "packing").plan_microbatches
        plan_c = revs["CAND"].registry.family_module(revs["CAND"].kernels, "packing").plan_microbatches
        assert plan_b.__module__ == "_polytrace_ab_base.packing.planner" and plan_c.__name__ == "plan_microbatches"
        assert "_plan_once" in plan_c.__code__.co_names and "_plan_once" not in plan_b.__code__.co_names
        assert [c.id for c in cases["BASE"]] == [c.id for c in cases["CAND"]]
        assert not list(base.root.rglob("__pycache__"))
        assert (base.root / "results/tuning/cpu/pack.json").is_file() and not (base.root / "results/cpu").exists()
    assert_clean(repo, own_tempdir)


def test_the_command_runs_as_a_program(repo, tmp_path):
    """The installed entry point's path: a separate process, no TTY (no progress lines), exit 2
    with one line on stderr for a refusal, and nothing on stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-m", "polytrace", "ab", "nope", "--repo", str(repo), "--allow-cpu"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("polytrace: error: BASE 'nope': no such revision") and proc.stderr.count("\n") == 1
    with pytest.raises(PolytraceError, match="not inside a git repository"):
        revisions.repo_root(tmp_path)
