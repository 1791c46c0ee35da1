"""Subcommands of this area are registered in ``register``; see polytrace/cli/__init__.py."""

from __future__ import annotations


def register(sub) -> None:
    """Add this module's subcommands to the ``polytrace`` parser (filled in by its issue)."""
