"""The calibration corpus, read once per test process.

``C.load_corpus`` on the 22 corpus logs costs about 22 CPU-seconds (measured 22.5 s on the project's
2-core CPU machine, commit efacef9: each log is parsed, configured and priced as ``validate`` does),
while a fit on it costs about 1.6 s. ``tests/calibrate/test_priors.py`` and ``tests/calibrate/test_folds.py`` both need
it; each read it on its own. Cached here, keyed by the folder, so a session reads it once
(``tests/conftest.py`` keeps both files on one pytest-xdist worker for the same reason). The
callers only read the corpus (fits and folds build their own lists), as ``test_folds``'s cached
three-log corpus already relied on.

Each read prices its logs through ``validate.prepare`` memoized (``tests/_prepared.py``: keyed by
the log, its folder's files, the overrides, the window and the ``POLYTRACE_*`` variables; a deep
copy out), the memo the ladder and validate tests also use: ``load_corpus`` prices 16 of the 22
logs exactly as they do (no overrides, or the stated GPU, window 10; the ten ladder logs, the three
small logs, ...), so in one process (``tests/conftest.py``'s ``XDIST_GROUPS``) each is priced once.
The memo is in place only while the corpus is read (nothing here plants a change in the pricing).
"""

from __future__ import annotations

import functools


def load(folder: str, names: list[str]):
    """``C.load_corpus(folder, names)`` with ``validate.prepare`` answered from the session's memo."""
    import pytest
    from _prepared import memoize

    from polytrace.calibrate import corpus as C
    from polytrace.calibrate import validate as V

    with pytest.MonkeyPatch.context() as mp:
        # a module's own patch (``each_log_priced_once``, tests/conftest.py) may be in place:
        # memoize the function under it, so both answer from the same memo
        mp.setattr(V, "prepare", memoize(getattr(V.prepare, "__wrapped__", V.prepare)))
        return C.load_corpus(folder, names)


@functools.cache
def full_corpus(folder: str):
    """Every corpus log (``folds.corpus_names``) of ``folder``, as ``load_corpus`` returns them."""
    from polytrace.calibrate import folds as F

    return load(folder, F.corpus_names(folder))
