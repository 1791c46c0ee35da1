"""Under the README's ``-n 2 --dist loadgroup`` every test carries its xdist group, so a file (or the
corpus group of ``conftest.XDIST_GROUPS``) runs on one worker and its module-scoped work is done once.

pytest-xdist reads the ``xdist_group`` marker in its own ``pytest_collection_modifyitems`` and appends
``@<group>`` to the node id; ``tests/conftest.py`` adds the marker in the same hook, so it must run
first (``tryfirst``). Before it did (until this file), xdist saw no marker, dealt the tests of a file
to both workers one by one, and each worker built every module fixture again: the compile test's
kernels (19 CPU-s), the static report's recompile (9), the corpus's fits and Ray's start-up twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import XDIST_GROUPS, xdist_group_of


def test_a_file_is_its_own_group_and_the_corpus_files_share_one():
    assert xdist_group_of("tests/kernels/test_attention.py::test_x[a-b]") == "tests/kernels/test_attention.py"
    corpus = {xdist_group_of(f"{path}::test_y") for path in XDIST_GROUPS}
    assert corpus == {"corpus"}
    here = Path(__file__).resolve().parent.parent
    assert all((here / path).is_file() for path in XDIST_GROUPS), sorted(XDIST_GROUPS)


def test_xdist_deals_this_test_by_its_group(request):
    """On a worker of ``--dist loadgroup`` xdist has suffixed this node id with the group; outside
    xdist (one process) there is nothing to deal."""
    if not hasattr(request.config, "workerinput") or not request.config.getvalue("loadgroup"):
        pytest.skip("not a worker of pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.endswith("@tests/test_xdist_groups.py"), request.node.nodeid
