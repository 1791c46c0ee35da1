"""Ctrl-C at any moment of a command (imports, parsing, work, writing): ``polytrace: interrupted``
on stderr, exit 130, no traceback, and no empty or half-written output folder. A real SIGINT is
sent to a subprocess at several moments, counted from a line printed once ``main`` has its handler
(``from polytrace.cli import main`` imports only ``sys``: argparse, signal and every heavy import
run inside ``main``'s handling). An interrupt
inside Python's own start-up (its site module: 0.19 s on this machine, owing to its .pth files)
is the interpreter's, not ours."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

# as the console script calls it (``polytrace = "polytrace.cli:main"``): main() reads sys.argv and, past
# the work, leaves SIGINT ignored, so an interrupt during the interpreter's shutdown cannot kill the
# finished process with signal 2 (``main(sys.argv[1:])`` restores the caller's handler instead, which
# is right in-process and was the shutdown race a full run hit once: rc -2 at 2.0 s into report).
# "started" is printed once main's handler exists: a SIGINT in the microseconds between the console
# script's import and main's first line is Python's default handler's, like one in site's start-up
# (a stress run of 240 interrupts, two at a time on 2 cores, landed 3 there when "started" was
# printed before main was called, each a 3-line traceback from "<string>")
LAUNCH = ("import sys; from polytrace import cli\n"
          "class Started(cli._SigintSeen):\n"
          "    def __init__(self):\n"
          "        super().__init__(); print('started', flush=True)\n"
          "cli._SigintSeen = Started; sys.exit(cli.main())")


def _sigint_as_in_a_terminal() -> None:
    """SIGINT at its default in the child, as a terminal's Ctrl-C finds it: a test run started in
    the background (``cmd &`` in a script, nohup) inherits SIGINT ignored, Python keeps an ignored
    SIGINT ignored, and the child would then finish as if never interrupted."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(argv: list[str], after_s: float, cwd) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_in_a_terminal)
    assert proc.stdout.readline() == "started\n"
    time.sleep(after_s)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _interrupted_cleanly(rc: int, err: str) -> None:
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert rc == 130 and err == "polytrace: interrupted\n", (rc, err)


@pytest.mark.parametrize("after_s", [0.0, 0.3, 2.0])
def test_report_interrupted_leaves_no_folder(tmp_path, after_s):
    """The report takes seconds (sampling, pricing 8 steps, two plots), so each moment lands in it."""
    out = tmp_path / "my report"
    rc, _, err = _interrupt(["report", "-o", str(out)], after_s, tmp_path)
    if rc == 0:  # a machine fast enough to finish first: then the report is whole
        assert (out / "report.md").is_file() and after_s >= 2.0
        return
    _interrupted_cleanly(rc, err)
    assert not out.exists(), sorted(p.name for p in out.iterdir())


@pytest.mark.parametrize("argv", [["describe", "dapo-math-32b"], ["profiles"],
                                  ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8"]])
def test_interrupt_while_importing_and_parsing_is_one_line(tmp_path, argv):
    rc, _, err = _interrupt(argv, 0.0, tmp_path)
    _interrupted_cleanly(rc, err)


def test_bench_interrupted_leaves_no_folder(tmp_path):
    out = tmp_path / "bench out"
    rc, stdout, err = _interrupt(["bench", "-o", str(out), "--suite", "packing", "--allow-cpu"], 2.0, tmp_path)
    _interrupted_cleanly(rc, err.replace(err.split("polytrace: interrupted")[0], ""))
    assert "Traceback" not in err
    assert not out.exists()


def _self_interrupt_then(exc):
    """A command that is Ctrl-C'd inside code that turns the KeyboardInterrupt into another error
    (numpy's C-extension import: "PyCapsule_Import could not import module 'datetime'")."""
    def command(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise exc from None
        return 0
    return command


def test_an_interrupt_an_import_turned_into_another_error_is_still_an_interrupt(monkeypatch, capsys):
    from polytrace.cli import main, workload_cmds

    monkeypatch.setattr(workload_cmds, "cmd_profiles", _self_interrupt_then(ImportError("PyCapsule_Import failed")))
    # SIGINT as a terminal's Ctrl-C finds it: a test run started in the background inherits it
    # ignored, and main then keeps it ignored (a background job's), so the kill would not interrupt
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(["profiles"]) == 130
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handler back
    finally:
        signal.signal(signal.SIGINT, outer)
    assert capsys.readouterr().err == "polytrace: interrupted\n"


def test_an_error_without_an_interrupt_is_no_interrupt(monkeypatch):
    from polytrace.cli import main, workload_cmds

    def broken(args):
        raise ImportError("a real bug")

    monkeypatch.setattr(workload_cmds, "cmd_profiles", broken)
    with pytest.raises(ImportError, match="a real bug"):
        main(["profiles"])


def test_after_the_work_the_console_ignores_ctrl_c(monkeypatch, capsys):
    """Past main, the interpreter's shutdown has its handlers back at the default: a SIGINT there
    killed the process silently with status 130 after complete output (presets at 0.5 s)."""
    from polytrace.cli import main

    monkeypatch.setattr(sys, "argv", ["polytrace", "profiles"])
    before = signal.getsignal(signal.SIGINT)
    try:
        assert main() == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    assert "dapo-math-32b" in capsys.readouterr().out


def test_the_console_scripts_import_loads_no_parser():
    """What ``from polytrace.cli import main`` loads runs before any Ctrl-C handling exists: argparse
    and signal's enums there were interrupted into a traceback at 0.2 s on a loaded machine."""
    code = ("import sys; before = set(sys.modules); from polytrace.cli import main; "
            "print(sorted(m for m in set(sys.modules) - before if m in ('argparse', 'signal') "
            "or m.startswith('polytrace.cli.')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr)


def _interrupt_inside_a_weakref_callback_then(wait_s: float):
    """A command Ctrl-C'd while Python runs a weakref callback, where a KeyboardInterrupt cannot
    propagate (importlib's module-lock callback: a CI run printed "Exception ignored in ...
    _get_module_lock.<locals>.cb" with a traceback, and the command ran on)."""
    import weakref

    class Held:
        pass

    def command(args):
        held = Held()
        ref = weakref.ref(held, lambda _: os.kill(os.getpid(), signal.SIGINT))  # noqa: F841
        del held  # the callback runs here, and the interrupt lands inside it
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.001)
        return 0
    return command


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="POSIX: raised again by a SIGALRM timer")
@pytest.mark.parametrize("wait_s", [2.0, 0.0])
def test_an_interrupt_python_would_drop_in_a_callback_is_one_line(monkeypatch, capsys, wait_s):
    """2 s: raised again from the command's own code; 0 s: the command ends first, still 130."""
    from polytrace.cli import main, workload_cmds

    monkeypatch.setattr(workload_cmds, "cmd_profiles", _interrupt_inside_a_weakref_callback_then(wait_s))
    hook = sys.unraisablehook
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    alarm = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    try:
        assert main(["profiles"]) == 130
        assert time.monotonic() - started < 1.5  # interrupted, not waited out
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGALRM) == alarm and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert sys.unraisablehook is hook
    finally:
        signal.signal(signal.SIGINT, outer)
    assert capsys.readouterr().err == "polytrace: interrupted\n"


def test_other_unraisable_errors_still_reach_pythons_hook(monkeypatch):
    """Only a Ctrl-C is taken from the unraisable hook: a real error in a __del__ is still shown."""
    from polytrace.cli import main, workload_cmds

    shown = []
    monkeypatch.setattr(sys, "unraisablehook", shown.append)

    class Broken:
        def __del__(self):
            raise RuntimeError("a real bug in a finalizer")

    def command(args):
        Broken()
        return 0

    monkeypatch.setattr(workload_cmds, "cmd_profiles", command)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(["profiles"]) == 0
    finally:
        signal.signal(signal.SIGINT, outer)
    assert [u.exc_type for u in shown] == [RuntimeError]
