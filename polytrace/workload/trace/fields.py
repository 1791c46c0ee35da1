"""The boundary of every trace reader: typed, range-checked fields, parsed JSON of bounded depth,
and only regular files read.

A reader turns each JSON value into a number here and nowhere else, so everything past the
readers (the data model, ``Batch``, profiles, statistics) can trust that lengths are integers in
``[0, MAX_TOKENS]``, steps integers in ``[0, MAX_STEP]`` and seconds finite and non-negative. A value
that breaks a rule is a ``TraceFormatError`` naming the file, the line and the field.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

from ...errors import TraceFormatError

# Lengths fit in int32, as the kernels' cu_seqlens do: a 2**31-token sequence is ~4,000x the
# longest context any model trains on today, so anything longer is a corrupt record.
MAX_TOKENS = 2 ** 31 - 1
MAX_STEP = 2 ** 31 - 1
# One tool call or engine turn taking more than 11.6 days (1e6 s) is a unit mistake or corruption.
MAX_SECONDS = 1e6


class Where:
    """File and line a value came from, for the error message."""

    __slots__ = ("path", "line", "prefix")

    def __init__(self, path, line: int | None = None, prefix: str = ""):
        self.path = path
        self.line = line
        self.prefix = prefix  # e.g. "invalid native header: "

    def error(self, message: str) -> TraceFormatError:
        return TraceFormatError(self.path, self.prefix + message, line=self.line)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def count(where: Where, value, what: str, *, minimum: int = 1, maximum: int = MAX_TOKENS) -> int:
    """An integer in ``[minimum, maximum]`` (a JSON integer, or a float with an integral value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(f"{what} must be an integer, got {_show(value)}")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise where.error(f"{what} must be an integer, got {_show(value)}")
    v = int(value)
    if v < minimum:
        word = {0: "non-negative", 1: "positive"}.get(minimum, f"at least {minimum}")
        raise where.error(f"{what} must be {word}, got {v}")
    if v > maximum:
        raise where.error(f"{what} of {_show(v)} is above the limit of {maximum:,}")
    return v


def step_number(where: Where, value, what: str = "'step'") -> int:
    return count(where, value, what, minimum=0, maximum=MAX_STEP)


def seconds(where: Where, value, what: str) -> float:
    """A finite, non-negative duration below ``MAX_SECONDS``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(f"{what} must be a number of seconds, got {_show(value)}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise where.error(f"{what} must be finite and non-negative, got {_show(value)}")
    if v > MAX_SECONDS:
        raise where.error(f"{what} of {v:g} s is above the limit of {MAX_SECONDS:g} s")
    return v


def flag(where: Where, value, what: str) -> bool:
    """A JSON boolean (``null``, absent, 0 and 1 are read as false / true)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise where.error(f"{what} must be true or false, got {_show(value)}")


def text(where: Where, value, what: str, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise where.error(f"{what} must be a string, got {_show(value)}")
    return value


def array(where: Where, value, what: str, non_empty: bool = False) -> list:
    if not isinstance(value, list):
        raise where.error(f"{what} must be a list, got {_show(value)}")
    if non_empty and not value:
        raise where.error(f"{what} must not be empty")
    return value


def obj(where: Where, value, what: str) -> dict:
    if not isinstance(value, dict):
        raise where.error(f"{what} must be an object, got {_show(value)}")
    return value


def require_keys(where: Where, o: dict, keys: tuple[str, ...], context: str = "") -> None:
    """Every one of ``keys`` present in ``o``; else "[context: ]missing key 'k'" for the first absent."""
    for key in keys:
        if key not in o:
            raise where.error(f"{context}: missing key {key!r}" if context else f"missing key {key!r}")


def loads(where: Where, raw: str):
    """``json.loads`` whose failures (bad syntax, nesting deeper than the interpreter's recursion
    limit, integers of more than 4,300 digits) are one ``TraceFormatError``."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise where.error("JSON nested too deeply") from None
    except ValueError as exc:
        line = where.line
        if line is None and isinstance(exc, json.JSONDecodeError):
            line = exc.lineno
        raise TraceFormatError(where.path, f"{where.prefix}invalid JSON: {getattr(exc, 'msg', exc)}",
                               line=line) from None


def read_regular_file(path: Path) -> str:
    """The text of ``path``, refusing anything but a regular file: a FIFO or device named like a
    trace would block the reader forever or never end."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting; the type
        # is then checked on the open descriptor, so nothing can swap the file in between.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise TraceFormatError(path, "is a folder, not a trace file")
        if not stat.S_ISREG(mode):
            raise TraceFormatError(path, "not a regular file (a FIFO, device or socket): not read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read().decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, f"cannot read: {exc}") from None
    finally:
        os.close(fd)
