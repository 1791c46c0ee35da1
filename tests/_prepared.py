"""``validate.prepare`` memoized, for the test modules that price the same real logs many times.

``prepare`` (a log read, configured, checked and priced on every step) is most of what the step
model's slowest tests cost: ``tests/test_golden.py`` calls it 19 times on 10 logs (``validate`` and
``validate --zero-shot`` of the same 9 logs, on the same window), the ladder's 40 ordered pairs
(``tests/calibrate/test_ladder_calibration.py``) 80 times on 10 logs; a call took 0.4-2.6 CPU-s on
the project's 2-core machine. Its result is a pure function of the log file (and the companion
files beside it), the overrides, the window and the code: ``calibrate/test_prepared_memo.py``
checks that two calls give equal results and that the memo's answer equals a fresh call's.

Only modules that opt in (``patch_prepare`` in a module fixture: the golden, ladder and validate
tests) use it, and none of them patches the step model: a test that plants a change in the pricing
and calls ``validate`` must not get the price of an earlier call, so there is no session-wide patch.
The key holds the log's resolved path, the size and mtime of every file in its folder (companion
files, a multi-turn run's tables), the other arguments' ``repr`` (every field of the overrides'
dataclass, the window) and the ``POLYTRACE_*`` variables; each call returns a deep copy (an
unpickled one; ``validate`` appends to the notes it is given), so no caller sees another's changes.
"""

from __future__ import annotations

import inspect
import os
import pickle
from pathlib import Path

_MEMO: dict = {}  # {the memoized function: {key: its result}}, for the session


def _key(arguments: dict):
    """The memo's key of one call (``arguments``: its bound arguments, defaults applied); None for
    a path that is not a file."""
    p = Path(arguments["path"]).resolve()
    if not p.is_file():
        return None  # a wandb run folder: read as given, not memoized
    folder = tuple(sorted((q.name, st.st_size, st.st_mtime_ns) for q in p.parent.iterdir()
                          if q.is_file() and (st := q.stat())))
    arguments = dict(arguments)
    if "overrides" in arguments and arguments["overrides"] is None:
        # prepare reads no overrides as Overrides() (logconfig, infer and gpuinfer each say
        # ``overrides or Overrides()``): one key for both spellings, so validate's calibration
        # source (Overrides(gpu=None)) and a run priced with None, the ladder's two calls per rung,
        # price it once; test_prepared_memo checks that the two spellings price alike
        from polytrace.calibrate.logconfig import Overrides

        arguments["overrides"] = Overrides()
    rest = tuple((k, repr(v)) for k, v in arguments.items() if k != "path")  # overrides (a dataclass), window
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("POLYTRACE_")))
    return str(p), folder, rest, env


def memoize(prepare):
    """``prepare`` (same signature and defaults) answering a repeated call from ``_MEMO`` with a
    deep copy; a call the memo cannot key (a run folder) goes to ``prepare`` every time."""
    signature = inspect.signature(prepare)
    memo = _MEMO.setdefault(prepare, {})

    def memoized(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = _key(bound.arguments)
        if key is None:
            return prepare(*args, **kwargs)
        if key not in memo:
            # kept pickled: a copy out is then one ``pickle.loads`` (about 5x cheaper than
            # ``copy.deepcopy`` of the same rows, which cost the golden test ~3 CPU-s a session)
            memo[key] = pickle.dumps(prepare(*args, **kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        return pickle.loads(memo[key])

    memoized.__wrapped__ = prepare
    return memoized


def patch_prepare(monkeypatch) -> None:
    """Every ``prepare`` call of ``validate``, ``zero_shot``, ``calibrate`` and ``load_corpus``
    (they all reach it as ``polytrace.calibrate.validate.prepare``) through the memo."""
    from polytrace.calibrate import validate as V

    monkeypatch.setattr(V, "prepare", memoize(V.prepare))
