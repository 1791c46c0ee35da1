"""The ``polytrace`` command line.

Each subcommand lives in a small module that only parses arguments, calls one library function and
prints. Modules are registered explicitly (``_app.COMMAND_MODULE_NAMES``, no discovery by module
path). This module imports nothing at its top but ``sys``: the console script's ``from polytrace.cli
import main`` runs before any Ctrl-C handling can exist, and argparse with signal's enums took
0.2 s there on a loaded 2-core machine (2 of 110 interrupts at 0.2 s were tracebacks in it).
"""

from __future__ import annotations

import sys

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a process Ctrl-C ended
_FROM_APP = ("build_parser", "given_options", "command_modules", "COMMAND_MODULE_NAMES")


def __getattr__(name):  # PEP 562: the parser's names, loaded on first use
    if name in _FROM_APP:
        from . import _app

        return getattr(_app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Every outcome is an exit code: a user error one line and 2, Ctrl-C at any moment (imports,
    parsing, the work) ``polytrace: interrupted`` and 130, never a traceback.

    Two moments Python's own handler misses: an interrupt inside an extension's import (numpy turns
    the KeyboardInterrupt into an ImportError, "PyCapsule_Import could not import module datetime",
    a 20-line traceback at 0.2 s into ``report``), caught here because our handler saw the SIGINT;
    and one after the work, while the interpreter shuts down (its handlers are back at the default:
    killed silently with status 130, output complete): the console's SIGINT is ignored from there."""
    seen = None
    try:
        seen = _SigintSeen()
        from ._app import _main

        code = _main(argv)
        return _interrupted() if seen.dropped else code
    except KeyboardInterrupt:
        return _interrupted()
    except Exception:
        if seen is not None and seen.seen:
            return _interrupted()
        raise
    finally:
        if seen is not None:
            seen.restore(ignore=argv is None)


class _SigintSeen:
    """A SIGINT handler that records the interrupt and raises KeyboardInterrupt as Python's does;
    ``restore``: the handler it replaced (an in-process caller's), or ignored (the console). Built on
    ``_signal``, the builtin already loaded at start-up (``signal`` adds enums: ~5 ms more to import).

    A Ctrl-C that lands inside a callback Python cannot raise from (importlib's module-lock weakref
    callback, ``_get_module_lock.<locals>.cb``, or any ``__del__``) is printed by Python as
    "Exception ignored in ..." with a traceback, then dropped, and the command ran on to exit 0: a
    CI run hit it once in ~30 interrupts at import time. Such an interrupt is taken here instead of
    printed and raised again a few milliseconds later, from ordinary code, by a one-shot SIGALRM
    timer (POSIX; elsewhere ``main`` still reports it once the work returns)."""

    REDELIVER_AFTER_S = 0.005  # far beyond a callback's few microseconds, far below a human's notice

    def __init__(self):
        import _signal

        self.seen, self.previous = False, None
        self._previous_hook = self._previous_alarm = None
        # dropped: an interrupt Python swallowed and that was never raised again (the work ended first)
        self.dropped = self._in_hook = self._closing = False
        if _signal.getsignal(_signal.SIGINT) == _signal.SIG_IGN:  # a background job's: stays ignored
            return
        try:
            self.previous = _signal.signal(_signal.SIGINT, self._handle)
        except (ValueError, TypeError):  # not the main thread: nothing to install
            return
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable

    def _handle(self, signum, frame):
        self.seen = True
        if self._closing:  # main has its exit code: a redelivery now would escape main as a traceback
            return
        if self._in_hook:  # raised here it would be dropped again: once more, later
            self._redeliver_later()
            return
        self.dropped = False
        raise KeyboardInterrupt

    def _unraisable(self, unraisable) -> None:
        if not (self.seen and issubclass(unraisable.exc_type, KeyboardInterrupt)):
            self._previous_hook(unraisable)
            return
        self._in_hook = True
        try:
            self.dropped = True
            self._redeliver_later()
        finally:
            self._in_hook = False

    def _redeliver_later(self) -> None:
        import _signal

        if not hasattr(_signal, "setitimer"):  # Windows: main reports it after the work
            return
        if self._previous_alarm is None:
            self._previous_alarm = _signal.signal(_signal.SIGALRM, self._handle)
        _signal.setitimer(_signal.ITIMER_REAL, self.REDELIVER_AFTER_S)

    def restore(self, ignore: bool) -> None:
        self._closing = True
        import _signal

        if self.previous is None:
            return
        try:
            if self._previous_alarm is not None:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
                _signal.signal(_signal.SIGALRM, self._previous_alarm)
            _signal.signal(_signal.SIGINT, _signal.SIG_IGN if ignore else self.previous)
        except (ValueError, TypeError):
            pass
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._previous_hook


def _interrupted() -> int:
    import _signal

    try:  # a second Ctrl-C while exiting is not a traceback either
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    except ValueError:  # not the main thread: no handler to change
        pass
    try:
        print("polytrace: interrupted", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    return INTERRUPTED_EXIT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
