"""User-facing errors.

Anything a user can cause (a bad path, a malformed line, an unknown name) raises ``PolytraceError``
with a one-line message naming the file, line or argument. The CLI prints it as
``polytrace: error: <message>`` and exits non-zero, without a traceback.
"""

from __future__ import annotations


class PolytraceError(Exception):
    """A mistake in the user's input; the message is shown as is, on one line."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class TraceFormatError(PolytraceError):
    """A trace file that cannot be read: names the file and, where known, the line."""

    def __init__(self, path, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


# Past this many presets the error lists the nearest names, not all of them (one readable line).
LIST_ALL_UP_TO = 16


def unknown_name(kind: str, name: str, valid) -> PolytraceError:
    """The error for an unknown preset name: every valid name while there are few, else the nearest
    ones and the count."""
    valid = sorted(valid)
    if len(valid) <= LIST_ALL_UP_TO:
        return PolytraceError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(valid)}")
    import difflib

    near = difflib.get_close_matches(str(name).lower(), valid, n=6, cutoff=0.3) or valid[:6]
    every = "; see polytrace presets" if kind in ("GPU", "model") else ""
    return PolytraceError(f"unknown {kind} {name!r}; nearest valid {kind}s: {', '.join(near)} "
                          f"({len(valid)} in all){every}")
