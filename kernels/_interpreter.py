"""The Triton interpreter (CPU runs of the kernels): whether it is on, and its fixes across triton 3.6-3.9.

- ``interpreting()``: the one answer to "do our kernels run in the Triton interpreter?" for every
  family, read as Triton itself reads ``TRITON_INTERPRET`` (``triton.knobs.runtime.interpret``:
  "1", "true", "on", "yes" or "y", any case, count; "0", "", "false", " 1" or anything else does
  not). Earlier each family had its own reading: two took "false" as on, packing took only "1"
  and silently ran a torch fallback otherwise.
- ``check_runnable(tensor, name)``: the launchers' device gate: a CUDA tensor, or a CPU tensor
  under the interpreter; anything else is a ``ValueError`` naming the argument (never a silent
  torch fallback).
- ``interpreter_loop_bounds_fix()``: see below; compiled GPU kernels never touch it.

A family folder vendored without this module falls back to reading ``triton.knobs`` directly and
skips the fix (it only matters for the interpreter of triton < 3.9 with numpy >= 2.4).
"""

from __future__ import annotations

import os

# Triton's getenv_bool (C++, triton/_C): these strings, compared case-insensitively, mean "on"
_TRUTHY = ("1", "true", "on", "yes", "y")


def interpreting() -> bool:
    """True when Triton runs ``@triton.jit`` kernels in its interpreter (``TRITON_INTERPRET``)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # a triton without knobs: its documented reading
        return os.environ.get("TRITON_INTERPRET", "").lower() in _TRUTHY


def check_runnable(tensor, name: str) -> None:
    """Raise ``ValueError`` unless our Triton kernels can run on ``tensor``'s device: CUDA, or the
    CPU under the interpreter (where the loop-bounds fix is installed on first use)."""
    device = tensor.device
    if device.type == "cuda":
        return
    if device.type == "cpu" and interpreting():
        interpreter_loop_bounds_fix()
        return
    setting = os.environ.get("TRITON_INTERPRET")
    raise ValueError(f"{name} is on {device}: these Triton kernels need CUDA tensors, or CPU tensors under the "
                     f"Triton interpreter (TRITON_INTERPRET=1 before triton is imported; it is {setting!r})")


def interpreter_loop_bounds_fix() -> None:
    """Make the triton 3.6-3.8 interpreter accept loop bounds computed in the kernel.

    The kernels loop ``for start in range(lo, hi, BLOCK)`` over bounds known only on the device
    (vocabulary sizes, masked rows): compiled, these are scf.for loops Triton software-pipelines.
    The interpreter runs them as Python ``range``, which converts each bound with
    ``int(handle.data)``; every interpreter scalar (kernel argument, load, tl.where, tl.cdiv,
    reduction) is a shape-(1,) array, and numpy >= 2.4 refuses ``int()`` of a 1-d array ("only
    0-dimensional arrays can be converted to Python scalars"). No kernel-side expression gives a
    0-d value, and a while loop would lose the pipelining on the GPU, so this adds triton 3.9's own
    conversion (``int(data.squeeze())``) to the patches the interpreter applies for each launch.
    Interpreter only, installed once, idempotent; compiled kernels are untouched. Triton >= 3.9
    already converts this way and is left alone.
    """
    try:
        import triton
        import triton.language as tl
        from triton.runtime import interpreter

        version = tuple(int(x) for x in triton.__version__.split(".")[:2])
    except (ImportError, ValueError):
        return
    patch_lang = getattr(interpreter, "_patch_lang", None)
    if version >= (3, 9) or patch_lang is None or getattr(patch_lang, "polytrace_index_fix", False):
        return
    tensor_cls = tl.core.tensor

    def _index(self):
        return int(self.handle.data.squeeze())

    def _patch_lang_with_index(fn):
        scope = patch_lang(fn)
        if hasattr(scope, "set_attr"):  # restored with the interpreter's own patches after the launch
            scope.set_attr(tensor_cls, "__index__", _index)
        return scope

    _patch_lang_with_index.polytrace_index_fix = True
    interpreter._patch_lang = _patch_lang_with_index
