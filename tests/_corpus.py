"""The calibration corpus, read once per test process.

``P.load_corpus`` on the 22 corpus logs costs about 22 CPU-seconds (measured 22.5 s on the project's
2-core CPU machine, commit efacef9: each log is parsed, configured and priced as ``validate`` does),
while a fit on it costs about 1.6 s. ``tests/calibrate/test_priors.py`` and ``tests/calibrate/test_folds.py`` both need
it; each read it on its own. Cached here, keyed by the folder, so a session reads it once
(``tests/conftest.py`` keeps both files on one pytest-xdist worker for the same reason). The
callers only read the corpus (fits and folds build their own lists), as ``test_folds``'s cached
three-log corpus already relied on."""

from __future__ import annotations

import functools


@functools.cache
def full_corpus(folder: str):
    """Every corpus log (``folds.corpus_names``) of ``folder``, as ``load_corpus`` returns them."""
    from polytrace.calibrate import folds as F
    from polytrace.calibrate import priors as P

    return P.load_corpus(folder, F.corpus_names(folder))
