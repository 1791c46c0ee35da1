"""Ctrl-C at any moment of a command (imports, parsing, work, writing): ``polytrace: interrupted``
on stderr, exit 130, no traceback, and no empty or half-written output folder. A real SIGINT is
sent to a subprocess at several moments, counted from a line printed where the console script
calls ``main`` (after ``from polytrace.cli import main``, which imports only polytrace.errors:
argparse, signal and every heavy import run inside ``main``'s handling). An interrupt
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
# is right in-process and was the shutdown race a full run hit once: rc -2 at 2.0 s into report)
LAUNCH = "import sys; from polytrace.cli import main; print('started', flush=True); sys.exit(main())"


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
