"""A run setting's flag has its declaration's default in every command (``polytrace.run.spec``):
calibrate's --stage-times flags were hand-written with None for ``--strategy`` and ``--framework``
(declared fsdp and verl), so a reader of ``args`` had to know which command it came from."""

from __future__ import annotations

import argparse

import pytest

from polytrace.cli import build_parser, main
from polytrace.run.spec import declarations


def _declared_flags():
    """(command, declaration, the command's action) for every flag a command takes for a declared setting."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for action in parser._actions:
            for d in declarations().values():
                if d.flag in action.option_strings and d.argument == action.dest:
                    yield name, d, action


def test_every_run_flag_has_its_declared_default():
    seen = list(_declared_flags())
    # estimate, impact, validate and calibrate take the run's settings as flags (113 today)
    assert len(seen) >= 100 and {"calibrate", "estimate", "validate"} <= {c for c, _, _ in seen}
    for command, d, action in seen:
        # a switch is off unless given (inverted ones too: --no-ref); "auto" is no value argparse reads
        want = False if d.kind == "bool" else None if d.default == "auto" else d.default
        assert action.default == want, f"{command} {d.flag}: default {action.default!r}, declared {want!r}"


@pytest.mark.parametrize("flag", [["--strategy", "fsdp"], ["--framework", "verl"], ["--lora-rank", "3"]])
def test_calibrating_a_log_refuses_stage_times_flags_given_at_their_defaults_too(capsys, tmp_path, flag):
    """Given on the command line is what a log refuses (a flag that states what the log states),
    whatever its value: ``--strategy fsdp`` is refused as ``--strategy megatron`` is."""
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(tmp_path / "run.log"), *flag, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"polytrace: error: calibrate: {flag[0]} applies to --stage-times; a log states its own"
    assert not out.exists()
