"""``--help`` shows the settings a first run sets, grouped by the run's sections, and ends with one
line naming ``--help-all``; ``--help-all`` lists every flag (issue 38: estimate's --help was 223
lines). Which flags are advanced is said once, by each setting's declaration (polytrace.run.spec)."""

from __future__ import annotations

import argparse
import re

import pytest

from polytrace.cli import build_parser, main
from polytrace.run.spec import declarations

# the long commands; a screen is ~80 lines of 80 columns
LONG_COMMANDS = ("estimate", "impact", "validate", "calibrate")
MAX_SHORT_LINES = 80
# what a newcomer sets (the list): in estimate's short help
MAIN_FLAGS = ("--model", "--gpu", "--gpus", "--profile", "--steps", "--prompts", "--n", "--max-prompt-len",
              "--max-response-len", "--lengths", "--mode", "--json")


def _help(capsys, monkeypatch, *argv) -> str:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps at the terminal's width
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 0
    out = capsys.readouterr()
    assert out.err == ""
    return out.out


def _listed(text: str) -> set[str]:
    """The option strings the help lists as entries (not those its prose mentions)."""
    out: set[str] = set()
    for line in text.splitlines():
        if line.startswith("  -"):
            out.update(re.findall(r"(?:^  |, )(--?[\w-]+)", line))
    return out


def _names(text: str, flag: str) -> bool:
    return flag in _listed(text)


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _shown_flags(parser) -> list[str]:
    """Every option string --help-all must list (deprecated spellings are hidden everywhere)."""
    return [s for a in parser._actions if a.help is not argparse.SUPPRESS for s in a.option_strings]


@pytest.mark.parametrize("command", LONG_COMMANDS)
def test_short_help_fits_a_screen_and_ends_naming_help_all(capsys, monkeypatch, command):
    short = _help(capsys, monkeypatch, command, "--help")
    full = _help(capsys, monkeypatch, command, "--help-all")
    lines = short.rstrip("\n").splitlines()
    assert len(lines) <= MAX_SHORT_LINES, f"{command} --help is {len(lines)} lines"
    assert len(full.splitlines()) > len(lines)
    last = lines[-1]
    assert f"polytrace {command} --help-all" in last and "--help-all" in _listed(short)
    # the count it gives is the number of options the short help leaves out
    flags = _shown_flags(_command(command))
    left_out = {a for a in _command(command)._actions if a.help is not argparse.SUPPRESS and a.option_strings
                and not any(_names(short, s) for s in a.option_strings)}
    assert int(re.match(r"(\d+) more options", last).group(1)) == len(left_out) > 0
    for flag in flags:
        assert _names(full, flag), f"{command} --help-all does not list {flag}"


def test_estimate_short_help_lists_the_main_settings_under_section_headings(capsys, monkeypatch):
    short = _help(capsys, monkeypatch, "estimate", "--help")
    for flag in MAIN_FLAGS:
        assert _names(short, flag), flag
    for heading in ("the model and cluster:", "the batch:", "lengths:", "execution modes:"):
        assert f"\n{heading}\n" in short
    # each heading holds its section's flags: --prompts under the batch, --max-response-len under lengths
    assert short.index("\nthe batch:\n") < short.index("--prompts") < short.index("\nlengths:\n") \
        < short.index("--max-response-len")
    assert short.startswith("usage: polytrace estimate [options]\n")


@pytest.mark.parametrize("command", ("estimate", "impact"))
def test_a_run_setting_is_in_the_short_help_as_its_declaration_says(capsys, monkeypatch, command):
    """The one place a flag is marked advanced is its declaration: every declared flag the command
    has is in --help exactly when its declaration is not advanced (hand-written ones included)."""
    short = _help(capsys, monkeypatch, command, "--help")
    flags = set(_shown_flags(_command(command)))
    checked = 0
    for d in declarations().values():
        if d.flag in flags:
            checked += 1
            assert _names(short, d.flag) is not d.advanced, f"{command} {d.flag} advanced={d.advanced}"
    assert checked >= 20  # estimate: 33 declared flags; impact: 27


def test_marking_a_declaration_advanced_moves_its_flag_out_of_the_short_help(capsys, monkeypatch):
    import dataclasses

    decls = dict(declarations())
    monkeypatch.setitem(decls, "prompts", dataclasses.replace(decls["prompts"], advanced=True))
    monkeypatch.setattr("polytrace.cli._settings.declarations", lambda: decls)
    monkeypatch.setattr("polytrace.run.spec.declarations", lambda: decls)
    short = _help(capsys, monkeypatch, "estimate", "--help")
    assert not _names(short, "--prompts") and _names(short, "--n")
    assert _names(_help(capsys, monkeypatch, "estimate", "--help-all"), "--prompts")


def test_a_command_with_nothing_advanced_keeps_plain_help(capsys, monkeypatch):
    short = _help(capsys, monkeypatch, "profiles", "--help")
    assert "--help-all" not in short
    for flag in _shown_flags(_command("profiles")):
        assert _names(short, flag)
