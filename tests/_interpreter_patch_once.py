"""The Triton interpreter patches ``triton.language`` once per kernel launch, not again on every call
of a nested ``@triton.jit`` helper.

In the interpreter (triton 3.6-3.9, ``triton/runtime/interpreter.py``) a launch
(``GridExecutor.__call__``) swaps every builtin of ``triton.language``, ``triton.language.core``,
``tl.math`` and ``tl.tensor`` for its interpreted version (``_patch_lang``), runs every program of
the grid, and puts the originals back. A call of a nested ``@triton.jit`` function from inside a
kernel (``InterpretedFunction.__call__``: our attention and log-prob kernels call helpers once per
block) runs ``_patch_lang`` again, walking the same modules with ``inspect.getmembers``: every
builtin is already swapped, so it changes nothing but costs ~1 ms a call, and it is not put back
either. Measured under cProfile (CPU machine): 4.4 of the 8.3 s of kernel time of the Liger
cross-entropy peer tests, 6.4 of the 29 s of one multi-token decode case.

``install`` wraps the interpreter's ``_patch_lang`` and ``GridExecutor.__call__``: during a launch,
after the launch's own patching, a nested call whose function sees only the language modules the
launch patched gets nothing done (what it would have done is done); one that sees another module
(``tl.core`` under its own name, say) is patched as before, and the launch then counts that module
as patched. Outside a launch nothing changes. The kernels compute exactly what they computed (the
same interpreted builtins are in force at every call); only the repeated walk is skipped.

Where the interpreter lacks either name (a Triton whose interpreter is shaped otherwise) nothing is
installed, and the tests run as before, slower.
"""

from __future__ import annotations

import inspect


class _Done:
    """The scope of a patch not repeated: nothing to put back (the launch's own scope does it)."""

    def restore(self) -> None:
        return None


def _langs(fn, candidates) -> frozenset:
    return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in candidates)


def install() -> bool:
    """Wraps the interpreter as the module docstring says; True when installed (idempotent)."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except ImportError:
        return False
    grid_executor = getattr(interp, "GridExecutor", None)
    patch_lang = getattr(interp, "_patch_lang", None)
    if not (isinstance(grid_executor, type) and callable(patch_lang)):
        return False
    if getattr(patch_lang, "_polytrace_once", False):
        return True
    candidates = (tl, tl.core)
    launches: list[dict] = []  # per launch in progress: {"langs": patched module ids, "patched": bool}

    def once(fn):
        if not launches:
            return patch_lang(fn)
        launch = launches[-1]
        langs = _langs(fn, candidates)
        if not launch["patched"]:  # the launch's own patching: the scope it restores at its end
            launch["patched"] = True
            launch["langs"] = set(langs)
            return patch_lang(fn)
        if langs <= launch["langs"]:
            return _Done()
        launch["langs"] |= langs
        return patch_lang(fn)

    once._polytrace_once = True
    launch_call = grid_executor.__call__

    def launch(self, *args, **kwargs):
        launches.append({"langs": set(), "patched": False})
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            launches.pop()

    interp._patch_lang = once
    grid_executor.__call__ = launch
    return True
