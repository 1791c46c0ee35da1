"""validate and calibrate LOG: the flags that state what a log leaves unstated are generated from
their RunSpec declarations (``run.spec.LOG_OVERRIDES``), not written by hand (issue 35 item 1)."""

from __future__ import annotations

import argparse

import pytest

from polytrace.cli import build_parser
from polytrace.cli.validate_cmds import _overrides
from polytrace.run.spec import LOG_OVERRIDES, declarations


def _sub(name):
    act = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return act.choices[name]


@pytest.mark.parametrize("cmd", ["validate", "calibrate"])
def test_each_log_override_is_its_declarations_flag(cmd):
    opts = {o: a for a in _sub(cmd)._actions for o in a.option_strings}
    for name in LOG_OVERRIDES:
        d = declarations()[name]
        act = opts[d.flag]
        assert act.dest == d.argument and act.default is None, name
        assert act.help.startswith(d.help.split(" (default:")[0]) and "when the log does not state it" in act.help


def test_the_flags_reach_the_overrides_and_keep_their_bounds(capsys):
    args = build_parser().parse_args(["validate", "x.log", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "16",
                                      "--prompts", "64", "--n", "8", "--max-prompt-len", "512",
                                      "--max-response-len", "2048", "--rollout-tp", "2"])
    ov = _overrides(args)
    assert (ov.model, ov.gpu, ov.gpus, ov.prompts, ov.n, ov.max_prompt_len, ov.max_response_len, ov.rollout_tp) == (
        "qwen2.5-7b", "h100", 16, 64, 8, 512, 2048, 2)
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(["validate", "x.log", "--gpus", "0"])
    assert err.value.code == 2 and "--gpus" in capsys.readouterr().err
