"""Set-up a newcomer meets: where the tests find the shared data."""

from __future__ import annotations

from conftest import SHARED_ENV, shared_root


def test_the_variable_wins(tmp_path):
    (tmp_path / "shared" / "polytrace-data").mkdir(parents=True)
    root, explicit = shared_root({SHARED_ENV: "/elsewhere"}, tmp_path / "repo")
    assert root.as_posix() == "/elsewhere" and explicit


def test_shared_beside_the_checkout_is_found_without_a_variable(tmp_path):
    (tmp_path / "shared" / "validation-logs").mkdir(parents=True)
    root, explicit = shared_root({}, tmp_path / "repo")
    assert root == tmp_path / "shared" and not explicit


def test_no_variable_and_nothing_beside_means_none(tmp_path):
    (tmp_path / "shared").mkdir()  # present but empty: not the data
    assert shared_root({}, tmp_path / "repo") == (None, False)
