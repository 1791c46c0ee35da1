"""The test tree collects as one: a second ``conftest.py`` below ``tests/`` puts another module named
``conftest`` on pytest's import path, and the modules that ``from conftest import ...`` (the shared-data
helpers) then fail to import when the whole tree is collected (it happened with tests/peers/)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_one_conftest_in_the_test_tree():
    found = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("conftest.py"))
    assert found == ["conftest.py"], found
