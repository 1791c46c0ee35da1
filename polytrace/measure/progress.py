"""Progress on long work, one policy for ``ab``, ``bench`` and ``tune``: on a terminal a live bar
(tqdm) that redraws itself; when stderr is not a terminal (a log file, CI, a pipe) plain lines
only, one every few seconds and one at the end, never carriage-return bars (a 146 s ``ab`` run was
silent in logs, while ``tune`` wrote hundreds of ``\\r`` redraws into them). Commands whose units
of work are long (an ``ab`` case, a ``bench`` shard) print one line per unit instead, on a
terminal or not."""

from __future__ import annotations

import sys
import time

# A line at most this often when not on a terminal: a 10-minute tuning session logs ~120 lines.
EVERY_S = 5.0


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


class Progress:
    """``update(n)`` / ``close()`` like a tqdm bar, with the policy above."""

    def __init__(self, total: int, label: str, *, enabled: bool = True, unit: str = "step", stream=None,
                 every_s: float = EVERY_S, clock=time.monotonic):
        self.total, self.label, self.unit, self.enabled = int(total), label, unit, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.every_s, self.clock = every_s, clock
        self.done = 0
        self.start = self.last = clock()
        self.lines = 0
        self.bar = None
        if enabled and is_terminal(self.stream):
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit=unit, leave=False, file=self.stream)

    def _line(self) -> None:
        pct = f" ({self.done / self.total:.0%})" if self.total else ""
        self.stream.write(f"{self.label}: {self.done}/{self.total} {self.unit}s{pct}, "
                          f"{self.clock() - self.start:.0f} s\n")
        self.stream.flush()
        self.lines += 1

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and self.clock() - self.last >= self.every_s:
            self.last = self.clock()
            self._line()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.lines:  # a short run prints nothing; a logged long one, its end
            self._line()
