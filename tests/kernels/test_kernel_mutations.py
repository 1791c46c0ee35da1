"""``scripts/mutation_check.py`` stays runnable: its planted bugs still match the kernels' source.

The script itself is not part of CI (each mutation is a pytest run in the interpreter), and it
reports a snippet that no longer occurs exactly once as *stale* only when someone runs it. A
kernel edit that stales the list would otherwise go unnoticed until the next kernel PR's author
runs the script; these checks read files only (milliseconds).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutation_check():
    name = "polytrace_mutation_check"
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(ROOT / "scripts"))  # its list, the kernel_mutations package, lies beside it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "scripts"))
        sys.modules.pop(name, None)


def test_every_planted_bug_matches_its_kernel_exactly_once(mutation_check):
    stale = []
    for m in mutation_check.MUTATIONS:
        count = (ROOT / m.path).read_text().count(m.old)
        if count != 1:
            stale.append(f"{m.name}: snippet found {count} times in {m.path}")
    assert not stale, "update scripts/mutation_check.py: " + "; ".join(stale)
    names = [m.name for m in mutation_check.MUTATIONS]
    assert len(names) == len(set(names)), "mutation names must be unique (--only selects by name)"
    assert all(m.old != m.new for m in mutation_check.MUTATIONS)
    assert {m.family for m in mutation_check.MUTATIONS} <= set(mutation_check.FAMILY_TESTS)


def test_every_test_the_mutations_run_exists(mutation_check):
    missing = []
    for target in {t for tests in mutation_check.FAMILY_TESTS.values() for t in tests}:
        path, _, func = target.partition("::")
        if not (ROOT / path).is_file():
            missing.append(target)
        elif func and func not in {n.name for n in ast.walk(ast.parse((ROOT / path).read_text()))
                                   if isinstance(n, ast.FunctionDef)}:
            missing.append(target)
    assert not missing, f"scripts/mutation_check.py runs tests that do not exist: {sorted(missing)}"
