"""The CI recipe (examples/gpu-ab-gate.yml): its gate step, run with a fake ``polytrace`` and a fake
``gh``, posts the report as a PR comment and fails the check exactly when ``polytrace ab`` exits
non-zero (1 regression, 2 refused, 3 inconclusive, each with its own line); the workflow runs only
on a self-hosted GPU runner, only for same-repository PRs, with ``--until-decided``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml (the dev extra) reads the example workflow")

WORKFLOW = Path(__file__).resolve().parents[1] / "examples" / "gpu-ab-gate.yml"
AB = "polytrace ab origin/main HEAD --markdown --until-decided --max-pairs 256 --budget-s 2400"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _gate_step() -> dict:
    steps = _workflow()["jobs"]["ab"]["steps"]
    [step] = [s for s in steps if AB in s.get("run", "")]
    return step


def test_workflow_shape():
    wf = _workflow()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "pull_request" in on
    job = wf["jobs"]["ab"]
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    assert "head.repo.full_name == github.repository" in job["if"]  # no fork code on the GPU machine
    checkout = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0  # origin/main must be there for the worktree
    assert wf["permissions"]["pull-requests"] == "write"
    assert _gate_step()["shell"] == "bash"


FAKE_POLYTRACE = """#!/bin/bash
echo "$@" > "$FAKE_LOG/polytrace.args"
if [ -n "$FAKE_STDOUT" ]; then printf '%s\\n' "$FAKE_STDOUT"; fi
if [ -n "$FAKE_STDERR" ]; then printf '%s\\n' "$FAKE_STDERR" >&2; fi
exit "$FAKE_CODE"
"""
FAKE_GH = """#!/bin/bash
echo "$@" > "$FAKE_LOG/gh.args"
while [ $# -gt 0 ]; do
  if [ "$1" = "--body-file" ]; then cp "$2" "$FAKE_LOG/comment.md"; fi
  shift
done
exit "${FAKE_GH_CODE:-0}"
"""


def _run_step(tmp_path, code: int, stdout: str = "", stderr: str = "", gh_code: int = 0):
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    bin_dir, log, work = tmp_path / "bin", tmp_path / "log", tmp_path / "work"
    for d in (bin_dir, log, work):
        d.mkdir()
    for name, text in (("polytrace", FAKE_POLYTRACE), ("gh", FAKE_GH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "step.sh"
    script.write_text(_gate_step()["run"])
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "FAKE_CODE": str(code),
           "FAKE_STDOUT": stdout, "FAKE_STDERR": stderr, "FAKE_GH_CODE": str(gh_code), "PR_NUMBER": "42",
           "GH_TOKEN": "x", "GITHUB_REPOSITORY": "org/polytrace", "GITHUB_RUN_ID": "7"}
    # how GitHub runs a `shell: bash` step
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)
    return proc, log


@pytest.mark.parametrize("code", [0, 1])
def test_report_is_posted_and_the_check_fails_on_a_regression(tmp_path, code):
    report = "### polytrace ab: **FAIL**" if code else "### polytrace ab: **PASS**"
    proc, log = _run_step(tmp_path, code, stdout=report)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert (log / "polytrace.args").read_text().split() == AB.split()[1:]
    assert (log / "gh.args").read_text().startswith("pr comment 42 --body-file")
    comment = (log / "comment.md").read_text()
    assert comment.startswith(report) and "actions/runs/7" in comment
    assert ("::error::polytrace ab: regression" in proc.stdout) == bool(code)


def test_an_inconclusive_run_fails_the_check_and_says_so(tmp_path):
    report = "### polytrace ab: **INCONCLUSIVE** (1 case undecided; about 400 pairs would decide)"
    proc, log = _run_step(tmp_path, 3, stdout=report)
    assert proc.returncode == 3 and "::error::polytrace ab: inconclusive (exit 3)" in proc.stdout
    assert "regression" not in proc.stdout and "refused" not in proc.stdout
    assert (log / "comment.md").read_text().startswith(report)


def test_the_recipe_and_the_cli_agree_on_the_flags():
    from polytrace.cli import build_parser

    args = build_parser().parse_args(AB.split()[1:])
    assert args.until_decided and args.max_pairs == 256 and args.budget_s == 2400 and args.markdown


def test_a_refusal_fails_the_check_and_says_why(tmp_path):
    err = "polytrace: error: ab: origin/main: no such revision"
    proc, log = _run_step(tmp_path, 2, stderr=err)
    assert proc.returncode == 2 and f"refused or failed (exit 2): {err}" in proc.stdout
    comment = (log / "comment.md").read_text()
    assert "**could not run** (exit 2)" in comment and err in comment


@pytest.mark.parametrize("code", [0, 1])
def test_a_failed_comment_does_not_change_the_verdict(tmp_path, code):
    proc, _ = _run_step(tmp_path, code, stdout="### polytrace ab", gh_code=1)
    assert proc.returncode == code and "::warning::could not post the PR comment" in proc.stdout
