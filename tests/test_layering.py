"""The house rules that keep the code readable, checked on the source (no imports executed).

- Arrows point down: nothing under ``polytrace/`` outside ``polytrace/cli/`` (and the ``python -m``
  entry point) imports ``polytrace.cli``.
- ``kernels/`` stands alone: it never imports ``polytrace`` (a family folder can be vendored).
- No import cycle between files, counting every import (top-level or inside a function).
- No module over ``MAX_LINES`` (550) lines: a longer one is split along its seams.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> the import name it installs as (kernels/ installs as polytrace_kernels, see setup.py)
PACKAGES = {"polytrace": "polytrace", "kernels": "polytrace_kernels", "suites": "suites"}
MAX_LINES = 550


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, name in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([name, *parts])] = path
    return mods


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imports(module: str) -> set[str]:
    """Modules of this repository that ``module`` imports (``from a import b`` counts ``a.b`` when
    that is a module, else ``a``)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    package = module if _is_package(module) else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            # the deepest module of ours the name lies in
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, parsed once when a test first asks (195 files,
    ~1.5 CPU-s), not at import, where each xdist worker paid it while collecting."""
    return {m: _imports(m) for m in MODULES}


def test_the_walk_sees_the_imports():
    """Guards the checks below against a parser that finds nothing."""
    assert "polytrace.errors" in graph()["polytrace"]
    assert "polytrace.cli._io" in graph()["polytrace.cli.workload_cmds"]
    assert any(m.startswith("polytrace_kernels.") for m in graph()["polytrace.measure.tuning.session"])


def test_nothing_below_the_cli_imports_it():
    offenders = sorted(f"{m} imports {dep}" for m, deps in graph().items()
                       if m.startswith("polytrace.") and not m.startswith(("polytrace.cli", "polytrace.__main__"))
                       for dep in deps if dep == "polytrace.cli" or dep.startswith("polytrace.cli."))
    assert not offenders, offenders


def test_kernels_stand_alone():
    offenders = sorted(f"{m} imports {dep}" for m, deps in graph().items() if m.startswith("polytrace_kernels")
                       for dep in deps if not dep.startswith("polytrace_kernels"))
    assert not offenders, offenders


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph()[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph()):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_between_files():
    """A package's ``__init__`` re-exporting its submodules is an edge like any other: a submodule
    that imports its own package's ``__init__`` back is a cycle (import the submodule instead)."""
    cycle = _cycle()
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)} has {lines} lines: split it along its seams"
