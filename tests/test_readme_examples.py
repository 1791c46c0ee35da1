"""Every example in README.md runs as written on a CPU or says what it needs: the ``polytrace``
and ``export`` lines of its fenced bash blocks are run here by bash, as a user would type them,
block by block (a block's later lines see what its earlier ones wrote), except those marked "needs
a GPU" (a GPU or GPU results). They run in a fresh folder named like a user's ("new user/polytrace",
a space included) with the shared folder beside it as ``../shared`` and ``POLYTRACE_SHARED``
unset: a block that needs the variable must set it itself. The test command of the README is the
one CI runs, and the README section ``.ci/run`` names exists."""

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
    """The block's ``polytrace`` and ``export`` lines as written, unless marked as needing a GPU."""
    return [line for line in block if line.startswith(("polytrace ", "export ")) and not GPU_MARK.search(line)]


BLOCKS = [ex for ex in (cpu_examples(b) for b in bash_blocks(README)) if any(ln.startswith("polytrace ") for ln in ex)]


def test_every_polytrace_line_runs_here_or_is_marked():
    lines = [ln for b in bash_blocks(README) for ln in b if "polytrace " in ln and not ln.startswith(("#", "pip"))]
    assert len(lines) >= 10
    for line in lines:
        assert line.startswith(("polytrace ", "pytest ", "scripts/")), line
        assert line.startswith("polytrace ") or GPU_MARK.search(line), f"not runnable on a CPU and not marked: {line}"
    assert sum(len(b) for b in BLOCKS) >= 7  # five things to try and the calibration chain


def test_polytrace_shared_is_explained_before_it_is_used():
    first = README.index("POLYTRACE_SHARED")
    assert "## Getting the data" in README[:first] and "../shared" in README[:first], README[first - 300:first]


def test_the_section_ci_names_exists():
    ci = (ROOT / ".ci" / "run").read_text()
    named = re.search(r'README\.md "([^"]+)"', ci)
    assert named and f"## {named.group(1)}\n" in README, named


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
    # two pytest-xdist workers, each test file on one (tests/conftest.py groups them by file)
    assert readme.split("&&")[-1].strip() == "python -m pytest -q -n 2 --dist loadgroup tests suites"


def _doc_blocks() -> list[tuple[str, list[str]]]:
    """(file, CPU lines) of each bash block of docs/*.md, continuation lines joined; a line with a
    ``...`` placeholder is prose, not a command."""
    out = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        for block in bash_blocks(path.read_text()):
            if any(ln.startswith("#") and GPU_MARK.search(ln) for ln in block):
                continue  # a block headed "# needs a GPU"
            lines = [ln for ln in cpu_examples(re.sub(r"\\\n\s*", " ", "\n".join(block)).splitlines())
                     if " ... " not in ln]
            if any(ln.startswith("polytrace ") for ln in lines):
                out.append((path.name, lines))
    return out


DOC_BLOCKS = _doc_blocks()


@pytest.mark.parametrize("name,block", DOC_BLOCKS, ids=[f"{n}:{b[0][:40]}" for n, b in DOC_BLOCKS])
def test_docs_examples_run_on_a_cpu(name, block, tmp_path):
    """docs/*.md as the README: each polytrace line not marked "needs a GPU" runs from a fresh folder."""
    assert DOC_BLOCKS and len(block) <= 4, "keep the docs' CPU examples few: each runs here"
    test_readme_examples_run_on_a_cpu(block, tmp_path)


@pytest.mark.parametrize("block", BLOCKS, ids=[b[0][:50] for b in BLOCKS])
def test_readme_examples_run_on_a_cpu(block, tmp_path):
    from conftest import shared_root

    home = tmp_path / "new user"
    checkout = home / "polytrace"
    checkout.mkdir(parents=True)
    if any("POLYTRACE_SHARED" in line for line in block):
        root, _ = shared_root()
        if root is None or not (Path(root) / "validation-logs").is_dir():
            pytest.skip("the shared folder (README: Getting the data) is not here")
        (home / "shared").symlink_to(Path(root).resolve(), target_is_directory=True)
    # `polytrace` on PATH runs this interpreter with this checkout's code, as an installed one would
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "polytrace").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m polytrace "$@"\n')
    (bin_dir / "polytrace").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("POLYTRACE_SHARED", "POLYTRACE_RESULTS_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    for i, line in enumerate(block):
        # each line in one bash, after the block's earlier exports (so a failure names its line)
        script = "\n".join([ln for ln in block[:i] if ln.startswith("export ")] + [line])
        proc = subprocess.run(["bash", "-ec", script], cwd=checkout, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr, line
        assert line.startswith("export ") or proc.stdout.strip(), line


def test_the_fast_subset_names_files_that_exist():
    """docs/testing.md's inner loop names test files and a marker that exist (a renamed file would
    make the documented command collect nothing)."""
    doc = (ROOT / "docs" / "testing.md").read_text()
    block = doc.split("## The inner loop of a kernel pull request", 1)[1].split("```", 2)[1]
    files = re.findall(r"tests/\S+\.py", block)
    assert len(files) >= 8 and all((ROOT / f).is_file() for f in files), files
    assert '-m "not slow"' in block and "slow:" in (ROOT / "pyproject.toml").read_text()


def _doc_commands() -> list[tuple[str, str]]:
    """(file, command) of every ``polytrace`` line in the bash blocks of README.md and docs/*.md,
    continuation lines joined, comments and shell redirections cut; lines with a ``...``
    placeholder are prose, not commands."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.strip()
                if line.startswith("polytrace ") and " ... " not in line:
                    out.append((path.name, re.split(r"\s+#|\s[|>]\s?", line)[0].strip()))
    return out


def test_every_documented_command_parses_with_todays_flags():
    """Every example of the README and docs/ parses with the current parser and uses no deprecated
    spelling (a renamed flag, such as gate's --plot, fails here before a reader meets it)."""
    import contextlib
    import io

    from polytrace.cli import build_parser

    commands = _doc_commands()
    assert len(commands) >= 25
    bad = []
    for name, cmd in commands:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                build_parser().parse_args(shlex.split(cmd)[1:])
        except SystemExit:
            pass
        if err.getvalue():
            bad.append(f"{name}: {cmd}: {err.getvalue().strip()}")
    assert not bad, bad
