"""Jupyter notebooks as logs: verl's getting-started notebook (and tutorials built on it) publish a
run as a code cell whose source is the launch (``!PYTHONUNBUFFERED=1 python3 -m
verl.trainer.main_ppo \\ ...``) and whose stream outputs are the console text. The cell holding
the most step lines is read as a console log: its source (shell escapes ``!`` dropped), then its
printed output, one text line per line; every other cell (installs, downloads) is passed over.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import PolytraceError
from .console import read_console_log

_STEP_LINE = re.compile(r"(?:^|[\s)\]])step:\d{1,9}\s{1,8}-\s{1,8}\S")
# a notebook is JSON; a console log big enough to matter is never one object with "cells"
_MAX_NOTEBOOK_BYTES = 512 * 1024 * 1024


def looks_like_notebook(path: Path, head: str) -> bool:
    start = head.lstrip()
    return path.suffix.lower() == ".ipynb" or (start.startswith("{") and '"cells"' in head[:4096])


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def _cell_output(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs") or ():
        if not isinstance(out, dict):
            continue
        if out.get("output_type") == "stream":
            parts.append(_text(out.get("text")))
        elif out.get("output_type") == "error":
            parts.append("\n".join(_text(t) for t in out.get("traceback") or ()))
    return "".join(parts)


def read_notebook_lines(path: Path) -> tuple[list[str], str]:
    """The chosen cell's source and output as text lines, and a note naming the cell."""
    try:
        if path.stat().st_size > _MAX_NOTEBOOK_BYTES:
            raise PolytraceError(f"{path}: notebook larger than {_MAX_NOTEBOOK_BYTES >> 20} MiB; "
                                 "save the training cell's output to a text file")
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise PolytraceError(f"{path}: cannot read notebook ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise PolytraceError(f"{path}: not a readable Jupyter notebook ({exc})") from None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise PolytraceError(f"{path}: not a Jupyter notebook (no 'cells' list)")
    best, best_steps, best_text = None, 0, ("", "")
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        output = _cell_output(cell)
        count = sum(1 for line in output.splitlines() if "step:" in line and _STEP_LINE.search(line))
        if count > best_steps:
            best, best_steps, best_text = index, count, (_text(cell.get("source")), output)
    if best is None:
        raise PolytraceError(f"{path}: no notebook cell printed training step lines "
                             "(expected 'step:N - timing_s/gen:... - ...' in a code cell's output)")
    source, output = best_text
    # IPython's shell escape: "!python3 -m verl..." runs the command after the "!"
    lines = [ln[1:] if ln.startswith("!") else ln for ln in source.splitlines()]
    lines += output.splitlines()
    note = (f"read notebook cell {best + 1} of {len(cells)} (its source as the launch command, "
            f"its printed output as the console log: {best_steps} step line(s)); line numbers "
            "count that cell's source lines, then its output lines")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    colab = meta.get("colab") if isinstance(meta.get("colab"), dict) else {}
    if isinstance(colab.get("gpuType"), str):
        # the runtime chosen when the file was last saved in Colab, not necessarily the machine
        # that printed the cell (verl's tutorial says T4 but its bf16 run needs sm80+)
        note += (f"; the notebook's Colab metadata names gpuType {colab['gpuType'][:40]!r}, not read as "
                 "the GPU that ran the cell")
    return lines, note


NAME = "notebook"


def sniff(path: Path, head: str) -> bool:
    return looks_like_notebook(path, head)


def read(path: Path):
    """The chosen cell read as a verl console log (``console``), its line numbers the cell's."""
    lines, note = read_notebook_lines(path)
    return read_console_log(path, lines=lines, notes=[note])
