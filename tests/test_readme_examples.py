"""Every example in README.md runs as written on a CPU or says what it needs: the ``polytrace``
lines of its fenced bash blocks are run here (in a scratch folder, block by block, so a block's
later lines see what its earlier ones wrote), except those marked "needs a GPU" (a GPU or GPU
results). The test command of the README is the one CI runs."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
GPU_MARK = re.compile(r"#.*needs (a )?GPU", re.I)


def bash_blocks(text: str) -> list[list[str]]:
    return [block.strip().splitlines() for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def cpu_examples(block: list[str]) -> list[str]:
    """The block's ``polytrace`` commands without their comments, unless marked as needing a GPU."""
    out = []
    for line in block:
        if line.startswith("polytrace ") and not GPU_MARK.search(line):
            out.append(line.split("  #")[0].split(" # ")[0].strip())
    return out


BLOCKS = [ex for ex in (cpu_examples(b) for b in bash_blocks(README)) if ex]


def test_every_polytrace_line_runs_here_or_is_marked():
    lines = [ln for b in bash_blocks(README) for ln in b if "polytrace " in ln and not ln.startswith(("#", "pip"))]
    assert len(lines) >= 10
    for line in lines:
        assert line.startswith(("polytrace ", "pytest ", "scripts/")), line
        assert line.startswith("polytrace ") or GPU_MARK.search(line), f"not runnable on a CPU and not marked: {line}"
    assert sum(len(b) for b in BLOCKS) >= 7  # five things to try and the calibration chain


def test_the_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    recipe = ci[ci.index(next(ln for ln in ci if "README test command" in ln)) + 1]
    readme = next(ln for b in bash_blocks(README) for ln in b if "pytest" in ln and "[dev]" in ln)

    def halves(cmd: str) -> tuple[str, str]:
        """(the install, the test run): python3 read as python, pip's own -q and `python -m` dropped."""
        install, run = (" ".join(part.replace("python3", "python").split()) for part in cmd.split("&&"))
        install = " ".join(w for w in install.removeprefix("python -m ").split() if w != "-q")
        return install, run

    assert halves(readme) == halves(recipe), (readme, recipe)
    assert readme.split("&&")[-1].strip() == "python -m pytest -q tests suites"


@pytest.mark.parametrize("block", BLOCKS, ids=[b[0][:50] for b in BLOCKS])
def test_readme_examples_run_on_a_cpu(block, tmp_path, request):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.pop("POLYTRACE_RESULTS_DIR", None)
    if any("$POLYTRACE_SHARED" in line for line in block):
        env["POLYTRACE_SHARED"] = str(request.getfixturevalue("validation_logs").parent)  # skips when unset
    for line in block:
        argv = shlex.split(os.path.expandvars(line.replace("$POLYTRACE_SHARED", env.get("POLYTRACE_SHARED", ""))))
        assert argv[0] == "polytrace"
        proc = subprocess.run([sys.executable, "-m", "polytrace", *argv[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr and proc.stdout.strip(), line
