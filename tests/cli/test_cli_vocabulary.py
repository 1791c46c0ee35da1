"""One spelling per concept in every subcommand (README "Flag vocabulary"): the test walks every
parser and fails on a second spelling of a shared concept unless it is a hidden deprecated alias of
the one spelling, and checks that the shared flags mean the same wherever they appear."""

from __future__ import annotations

import argparse
import re

import pytest

from polytrace.cli import build_parser
from polytrace.cli._args import DeprecatedAlias

# concept -> (the spellings to use, other spellings that may only survive as hidden deprecated aliases)
CONCEPTS = {
    "output": ({"-o", "--out"}, {"--output", "--output-dir", "--out-dir", "--outdir", "--output-file", "-O",
                                 "--plot", "--plot-dir"}),
    "hide progress": ({"-q", "--quiet"}, {"--no-progress", "--silent", "--no-progress-bar", "--no-bar"}),
    "steps": ({"--step", "--steps"}, {"--step-range", "--n-steps", "--nsteps", "--num-steps", "--step-list"}),
    "cpu override": ({"--allow-cpu"}, {"--cpu", "--force-cpu", "--on-cpu", "--interpret", "--interpreter"}),
    "suites": ({"--suite"}, {"--suites"}),
    "GPU count": ({"--gpus"}, {"--ranks", "--n-gpus", "--ngpus", "--num-gpus", "--world-size", "--dp"}),
    "GPU type": ({"--gpu"}, {"--device", "--gpu-type", "--gpu-name"}),
    "micro-batch budget": ({"--micro-batch-tokens"}, {"--max-tokens", "--max-token-len", "--mbt",
                                                      "--tokens-per-microbatch"}),
    "model": ({"--model"}, {"--model-name", "--model-config"}),
    "profile": ({"--profile"}, {"--workload", "--profile-name"}),
    "verl settings": ({"--set"}, {"--override", "--config-override"}),
    "JSON output": ({"--json"}, {"--as-json", "--format-json"}),
    "Markdown output": ({"--markdown"}, {"--md"}),
    "explanations": ({"--explain"}, {"--why", "--verbose-notes"}),
}
# a flag that runs GPU-meant work on a CPU says so in its help: it must be --allow-cpu
CPU_OVERRIDE_HELP = re.compile(r"interpreter|without a (CUDA )?GPU|on a CPU", re.I)


def _parsers(parser=None, path=()):
    parser = parser or build_parser()
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


PARSERS = dict(_parsers())


def _options(parser):
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def test_the_walk_reaches_every_subcommand():
    assert {"describe", "report", "fit", "estimate", "impact", "validate", "calibrate", "pack-compare", "gate",
            "ab", "bench", "tune", "plot", "results store", "results set-baseline"} <= set(PARSERS)


def test_no_second_spelling_of_a_shared_concept():
    bad = []
    for cmd, parser in PARSERS.items():
        for action in _options(parser):
            for spelling in action.option_strings:
                for concept, (use, others) in CONCEPTS.items():
                    if spelling in others and not (isinstance(action, DeprecatedAlias)
                                                   and action.help == argparse.SUPPRESS):
                        bad.append(f"{cmd}: {spelling} (the {concept} is spelled {'/'.join(sorted(use))})")
    assert not bad, bad


def test_every_deprecated_alias_is_hidden_and_stands_for_a_visible_option():
    aliases = 0
    for cmd, parser in PARSERS.items():
        visible = {a.dest for a in _options(parser) if not isinstance(a, DeprecatedAlias)}
        for action in _options(parser):
            if isinstance(action, DeprecatedAlias):
                aliases += 1
                assert action.help == argparse.SUPPRESS, (cmd, action.option_strings)
                assert action.dest in visible, (cmd, action.option_strings)
    assert aliases >= 8  # the old spellings of output, suites, CPU override, pack-compare's flags


def test_the_one_cpu_override_is_allow_cpu():
    bad = [f"{cmd}: {'/'.join(a.option_strings)}" for cmd, p in PARSERS.items() for a in _options(p)
           if a.nargs == 0 and not isinstance(a, DeprecatedAlias) and CPU_OVERRIDE_HELP.search(a.help or "")
           and "--allow-cpu" not in a.option_strings]
    assert not bad, bad
    for cmd in ("gate", "ab", "bench", "tune", "results store", "results set-baseline"):
        assert any("--allow-cpu" in a.option_strings for a in _options(PARSERS[cmd])), cmd


def test_output_is_dash_o_or_out_everywhere():
    for cmd, parser in PARSERS.items():
        for action in _options(parser):
            if isinstance(action, DeprecatedAlias):
                continue
            if "-o" in action.option_strings or "--out" in action.option_strings:
                assert action.option_strings == ["-o", "--out"], (cmd, action.option_strings)
    for cmd in ("fit", "report", "calibrate", "tune", "plot", "bench", "ab"):
        assert any(a.option_strings == ["-o", "--out"] for a in _options(PARSERS[cmd])), cmd


@pytest.mark.parametrize("cmd", [c for c, p in PARSERS.items() if any("--steps" in a.option_strings
                                                                       for a in _options(p))])
def test_steps_mean_the_same_everywhere(cmd):
    """``--steps 3`` is step 3 alone, ``--steps 2-4`` steps 2, 3 and 4, ``--step 3`` step 3: in
    every command that takes steps (``--steps 3`` once meant "steps 0-2" in two of them)."""
    parser = build_parser()
    positionals = {"describe": ["dapo-math-32b"], "pack-compare": ["dapo-math-32b"], "impact": ["a.json", "b.json"]}
    base = [*cmd.split(), *positionals.get(cmd, [])]
    if cmd == "estimate":
        base += ["--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8"]
    assert parser.parse_args([*base, "--steps", "2-4"]).steps == [2, 3, 4]
    assert parser.parse_args([*base, "--steps", "3"]).steps == [3]
    assert parser.parse_args([*base, "--step", "3"]).steps == [3]
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--step", "3", "--steps", "1-2"])  # one or the other


def test_suite_is_repeatable_and_the_old_spelling_still_works(capsys):
    parser = build_parser()
    assert parser.parse_args(["bench", "--suite", "a", "--suite", "b"]).suites == ["a", "b"]
    assert parser.parse_args(["ab", "x", "--suite", "a", "--suite", "b"]).suites == ["a", "b"]
    capsys.readouterr()
    assert parser.parse_args(["bench", "--suites", "a", "b"]).suites == ["a", "b"]
    assert "--suites is deprecated; use --suite S (repeatable)" in capsys.readouterr().err


@pytest.mark.parametrize("argv, dest, value, note", [
    (["fit", "t.jsonl", "--output", "p.json"], "out", "p.json", "--output is deprecated; use -o/--out"),
    (["report", "--output-dir", "d"], "out", "d", "--output-dir is deprecated; use -o/--out"),
    (["calibrate", "x.log", "--output", "c.json"], "out", "c.json", "--output is deprecated"),
    (["pack-compare", "p", "--ranks", "4"], "ranks", 4, "--ranks is deprecated; use --gpus"),
    (["pack-compare", "p", "--max-tokens", "99"], "max_tokens", 99, "use --micro-batch-tokens"),
    (["ab", "x", "--force"], "allow_cpu", True, "--force is deprecated; use --allow-cpu"),
    (["results", "store", "f.json", "--force"], "allow_throttled", True, "use --allow-throttled"),
    (["gate", "a.json", "b.json", "--force"], "force", True, "--force is deprecated; use --compare-refused"),
    (["gate", "a.json", "b.json", "--plot", "d"], "out", "d", "--plot is deprecated; use -o/--out"),
    (["results", "history", "--plot", "d"], "out", "d", "--plot is deprecated; use -o/--out"),
    (["tune", "pack", "--profile", "p", "--no-progress"], "quiet", True, "--no-progress is deprecated; use -q/--quiet"),
])
def test_old_spellings_work_with_a_note_on_stderr(argv, dest, value, note, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert note in err and err.startswith("polytrace: note:")


def test_an_old_spelling_still_gets_its_type_checked(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["pack-compare", "p", "--ranks", "many"])
    assert exc.value.code == 2 and "expected a positive integer" in capsys.readouterr().err


def test_outputs_create_their_parent_folders(tmp_path):
    from polytrace.atomic_write import atomic_write_text

    target = tmp_path / "a" / "b" / "c.json"
    atomic_write_text(target, "{}")
    assert target.read_text() == "{}"


def test_force_means_nothing_new_anywhere():
    """``--force`` meant three things (gate: compare refused inputs; ab: run on a CPU; results store:
    keep a throttled run): each has its own name now, and --force survives only as their hidden
    deprecated spelling."""
    seen = {}
    for cmd, parser in PARSERS.items():
        for action in _options(parser):
            if "--force" in action.option_strings:
                assert isinstance(action, DeprecatedAlias) and action.help == argparse.SUPPRESS, cmd
                seen[cmd] = action.use
    assert seen == {"gate": "--compare-refused", "ab": "--allow-cpu", "results store": "--allow-throttled",
                    "results set-baseline": "--allow-throttled"}, seen


def test_every_command_that_shows_progress_hides_it_with_quiet():
    with_progress = []
    for cmd, parser in PARSERS.items():
        for action in _options(parser):
            if isinstance(action, DeprecatedAlias) or "progress" not in (action.help or "").lower():
                continue
            with_progress.append(cmd)
            assert action.option_strings == ["-q", "--quiet"], (cmd, action.option_strings)
    assert {"bench", "tune", "ab"} <= set(with_progress), with_progress


def test_every_command_taking_a_profile_takes_the_profile_flag():
    for cmd, parser in PARSERS.items():
        positional = [a for a in parser._actions if not a.option_strings and "PROFILE" in str(a.metavar or "")]
        if positional:
            assert any(a.option_strings == ["--profile"] for a in _options(parser)), cmd
            assert all(a.nargs == "?" for a in positional), cmd  # still accepted positionally
    for cmd in ("describe", "fidelity", "pack-compare", "report", "estimate", "impact", "tune", "calibrate"):
        assert any("--profile" in a.option_strings for a in _options(PARSERS[cmd])), cmd


def test_the_profile_flag_and_the_positional_agree(capsys):
    from polytrace.cli import main

    assert main(["describe", "--profile", "deepcoder-14b", "--step", "0", "--json"]) == 0
    by_flag = capsys.readouterr().out
    assert main(["describe", "deepcoder-14b", "--step", "0", "--json"]) == 0
    assert capsys.readouterr().out == by_flag
    assert main(["describe", "deepcoder-14b", "--profile", "dapo-math-32b"]) == 2
    assert "the profile given twice" in capsys.readouterr().err
    assert main(["pack-compare"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a profile is required: give --profile NAME" in err


def test_every_output_is_dash_o():
    """gate and results history wrote with --plot DIR; every command that writes takes -o/--out."""
    for cmd in ("gate", "results history", "fit", "report", "calibrate", "tune", "plot", "bench", "ab"):
        assert any(a.option_strings == ["-o", "--out"] for a in _options(PARSERS[cmd])), cmd
