"""``torch.compile`` for the suites' compiled peers (torch-compile baselines, FlexAttention), fair
per shape and never silently eager.

One ``torch.compile`` object reused across shapes recompiles for each shape on the *same code
object*; after ``torch._dynamo.config.recompile_limit`` (8) shapes dynamo gives up and runs the
function eagerly, with only a log warning: the suite would time eager torch under the name
"torch-compile". Here each shape gets

- a fresh code object (``fresh_function``: same bytecode, its own dynamo cache), compiled with
  ``dynamic=False`` (a static-shape graph, what a fixed-shape trainer step gets) and
  ``fullgraph=True`` (a graph break raises instead of falling back to eager for the rest);
- calls under ``error_on_recompile`` (``guarded``): a recompile inside the timed rounds raises.

So hitting the limit or falling back to eager fails the case with torch's reason. The compiled
function is kept per (function, shape key) in ``CACHE`` so more input copies of one shape (the
harness's cold-L2 rotation) reuse it.
"""

from __future__ import annotations

import types
from collections.abc import Callable

CACHE: dict[tuple, Callable] = {}


def fresh_function(fn: Callable, tag: str) -> Callable:
    """A copy of ``fn`` with its own code object (dynamo keeps its cache per code object)."""
    name = f"{fn.__name__}__{''.join(ch if ch.isalnum() else '_' for ch in tag)}"[:120]
    code = fn.__code__.replace(co_name=name)
    copy = types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def compile_for_shape(fn: Callable, key: str) -> Callable:
    """``torch.compile(fresh copy of fn, dynamic=False, fullgraph=True)``, one per (fn, key)."""
    import torch

    k = (fn.__module__, fn.__qualname__, key)
    if k not in CACHE:
        CACHE[k] = torch.compile(fresh_function(fn, key), dynamic=False, fullgraph=True)
    return CACHE[k]


def guarded(compiled: Callable) -> Callable:
    """``compiled`` whose every call raises instead of recompiling (or falling back to eager after
    the recompile limit)."""
    import torch._dynamo.config as dynamo_config

    if not hasattr(dynamo_config, "error_on_recompile"):  # pragma: no cover - torch without the switch
        return compiled

    def call(*args, **kwargs):
        with dynamo_config.patch(error_on_recompile=True):
            return compiled(*args, **kwargs)

    return call
