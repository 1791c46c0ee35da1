"""The installed distribution: import names that cannot clash with other packages on the index."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _distribution():
    try:
        return importlib.metadata.distribution("polytrace")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("polytrace is not installed (pip install -e .)")


def test_distribution_provides_no_top_level_kernels():
    """`kernels` on the package index is the kernel hub used with transformers: installing both would
    overwrite one with the other. The repository's kernels/ folder installs as polytrace_kernels."""
    top_level = set((_distribution().read_text("top_level.txt") or "").split())
    assert "kernels" not in top_level
    assert top_level == {"polytrace", "polytrace_kernels"}
    assert "polytrace" in importlib.metadata.packages_distributions().get("polytrace_kernels", [])
    assert "polytrace" not in importlib.metadata.packages_distributions().get("kernels", [])


def test_polytrace_kernels_is_the_repository_kernels_folder():
    import polytrace_kernels
    import polytrace_kernels.attention
    import polytrace_kernels.logprob
    import polytrace_kernels.packing

    assert Path(polytrace_kernels.__file__).resolve().parent == ROOT / "kernels"
    assert Path(polytrace_kernels.packing.__file__).resolve().parent == ROOT / "kernels" / "packing"
