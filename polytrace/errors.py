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


def unknown_name(kind: str, name: str, valid) -> PolytraceError:
    """The error for an unknown preset name, listing the valid ones."""
    names = ", ".join(sorted(valid))
    return PolytraceError(f"unknown {kind} {name!r}; valid {kind}s: {names}")
