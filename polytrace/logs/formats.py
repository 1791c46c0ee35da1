"""The log formats, as a registry: a new format is one module and one line of ``FORMATS``.

A format module has ``NAME`` (what ``TrainingLog.format`` says), ``sniff(path, head) -> bool``
(``head``: the file's first ``HEAD_BYTES`` bytes as text; say yes only to what ``read`` takes)
and ``read(path) -> TrainingLog`` (``record``: steps with metrics and timings, the configuration
stated, the launch line, devices, notes on what was passed over). ``read_log`` asks the formats in
order and reads the file with the first that says yes; the verl console format takes any text, so
it stays last. Companion files, run folders and the multi-turn generated share are the reader's,
whatever the format. docs/adding-a-log-format.md walks through adding one.
"""

from __future__ import annotations

from pathlib import Path

from . import console, notebook, wandbcsv

# The first 4 KiB decide: a notebook's '"cells"' key and a CSV's header line sit there.
HEAD_BYTES = 4096

# Order matters: the first format whose ``sniff`` says yes reads the file.
FORMATS: list = [
    notebook,   # JSON with "cells" (or .ipynb): the cell that printed the steps
    wandbcsv,   # a .csv, or a header line naming a step column
    console,    # anything else: verl's console text (last: it takes every file)
]


def find(path: Path, head: str):
    """The first registered format whose ``sniff`` takes the file."""
    for fmt in FORMATS:
        if fmt.sniff(path, head):
            return fmt
    return console  # unreachable while console is registered; a registry without it still reads text


def names() -> list[str]:
    return [fmt.NAME for fmt in FORMATS]
