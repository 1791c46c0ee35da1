"""One planted kernel bug: an exact snippet of one file under ``kernels/`` and its buggy replacement."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    family: str
    path: str
    old: str
    new: str
    what: str
