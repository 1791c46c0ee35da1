"""The families' lazy public names (PEP 562): ``import polytrace_kernels.<family>.spec`` (FLOPs and
bytes, pure Python) must not import torch and triton, which a family's ``api`` and ``reference``
import; so a family's ``__init__`` imports them on first use of one of their names."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, table: dict[str, str], namespace: dict):
    """``(__getattr__, __dir__)`` for ``package``: a name of ``table`` (name -> submodule) is
    imported from that submodule on first use and kept in ``namespace`` (the package's globals),
    so later look-ups skip the hook."""

    def __getattr__(name: str):
        if name in table:
            value = getattr(importlib.import_module(f".{table[name]}", package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
