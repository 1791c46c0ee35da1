"""One CLI: the same conventions in every subcommand (issue 15 item 7 and the set-up of item 1)."""

from __future__ import annotations

import pytest

from polytrace.cli import build_parser, main


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def test_tune_reports_an_unknown_kernel_before_a_missing_profile(capsys):
    code, _, err = _run(capsys, "tune", "no-such-kernel")
    assert code == 2
    assert "no-such-kernel" in err and "token_logprobs" in err and "--profile" not in err.split("(see")[0]


def test_tune_help_shows_profile_as_required(capsys):
    code, out, _ = _run(capsys, "tune", "--help")
    assert code == 0
    usage = out.split("\n\n")[0]
    assert "--profile PROFILE" in usage and "[--profile" not in usage


def test_tune_on_a_cpu_says_exactly_what_to_set(monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: tune runs for real")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["tune", "pack", "--profile", "deepcoder-14b", "--budget-s", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "TRITON_INTERPRET=1 polytrace tune pack --profile deepcoder-14b" in err
    assert len(err.strip().splitlines()) == 1


def test_parser_builds():
    assert build_parser().prog == "polytrace"
