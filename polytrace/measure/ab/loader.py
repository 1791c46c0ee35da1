"""Two revisions' ``kernels/`` and ``suites/`` imported side by side in one process.

Each revision's ``kernels/`` folder becomes a package of its own name (``_polytrace_ab_base``,
``_polytrace_ab_cand``) and its ``suites/`` folder another (``_polytrace_ab_base_suites``, ...).
The suites import each other relatively, and the absolute name ``polytrace_kernels`` in a
revision's source (the suites' ``spec``, ``tolerance`` and ``reference`` imports, the registry's
default kernels) is read as that revision's kernels package: each revision runs with its own
FLOP counts, references and the tests' bounds, as ``pytest`` at that commit would. ``polytrace``
itself (the workload sampler, the results code) is the running one.

The rename is done while compiling (``_RenamingLoader``), never on disk, and no bytecode is cached
for these modules: ``__pycache__`` of a working tree keeps what a plain import compiled. Triton
caches compiled kernels by their source, so the two revisions' kernels coexist (identical kernels
share a binary). On exit every module of both revisions is dropped from ``sys.modules`` and the
finder is removed, so a second run in the same process imports afresh.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ...errors import PolytraceError

KERNELS_IMPORT_NAME = "polytrace_kernels"
_IMPORT_NAME = re.compile(rb"\b" + KERNELS_IMPORT_NAME.encode() + rb"\b")


class _RenamingLoader(importlib.machinery.SourceFileLoader):
    """Compiles a revision's source with ``polytrace_kernels`` read as that revision's kernels."""

    def __init__(self, fullname: str, path: str, kernels_name: str):
        super().__init__(fullname, path)
        self.kernels_name = kernels_name

    def get_code(self, fullname):
        source = _IMPORT_NAME.sub(self.kernels_name.encode(), self.get_data(self.path))
        return compile(source, self.path, "exec", dont_inherit=True)


class _RevisionFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of one revision's packages (module name -> folder)."""

    def __init__(self, packages: dict[str, Path], kernels_name: str):
        self.packages, self.kernels_name = packages, kernels_name

    def find_spec(self, fullname, path=None, target=None):
        for name, folder in self.packages.items():
            if fullname != name and not fullname.startswith(name + "."):
                continue
            base = folder.joinpath(*fullname[len(name) + 1:].split(".")) if fullname != name else folder
            if (base / "__init__.py").is_file():
                file, search = base / "__init__.py", [str(base)]
            elif base.with_name(base.name + ".py").is_file():
                file, search = base.with_name(base.name + ".py"), None
            else:
                return None
            loader = _RenamingLoader(fullname, str(file), self.kernels_name)
            return importlib.util.spec_from_file_location(fullname, str(file), loader=loader,
                                                          submodule_search_locations=search)
        return None


@dataclass
class LoadedRevision:
    label: str
    kernels: ModuleType  # the revision's kernels package (what a case's ``bind`` calls)
    suites: ModuleType  # the revision's suites package
    registry: ModuleType  # its ``suites.registry``


def module_names(label: str) -> tuple[str, str]:
    """(kernels package name, suites package name) of a revision: ``_polytrace_ab_base``, ..."""
    base = f"_polytrace_ab_{label.lower()}"
    return base, f"{base}_suites"


def _drop(prefixes: list[str]) -> None:
    for name in [n for n in sys.modules if any(n == p or n.startswith(p + ".") for p in prefixes)]:
        del sys.modules[name]


@contextmanager
def loaded(revisions: dict[str, Path]) -> Iterator[dict[str, LoadedRevision]]:
    """Import each revision (label -> folder holding kernels/ and suites/) under its own names."""
    finders, prefixes = [], []
    try:
        out = {}
        for label, root in revisions.items():
            kernels_name, suites_name = module_names(label)
            _drop([kernels_name, suites_name])  # a previous run interrupted before its cleanup
            prefixes += [kernels_name, suites_name]
            finder = _RevisionFinder({kernels_name: root / "kernels", suites_name: root / "suites"}, kernels_name)
            sys.meta_path.insert(0, finder)
            finders.append(finder)
            try:
                kernels = importlib.import_module(kernels_name)
                suites = importlib.import_module(suites_name)
                registry = importlib.import_module(f"{suites_name}.registry")
            except Exception as exc:  # noqa: BLE001 - any error in a revision's code: one line naming it
                raise PolytraceError(f"{label}: its kernels/ or suites/ do not import: {type(exc).__name__}: "
                                     f"{exc}") from None
            out[label] = LoadedRevision(label, kernels, suites, registry)
        yield out
    finally:
        for finder in finders:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
        _drop(prefixes)
        importlib.invalidate_caches()
