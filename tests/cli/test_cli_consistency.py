"""One CLI: the same conventions in every subcommand (the flag vocabulary itself is checked in
``test_cli_vocabulary``)."""

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


def test_tune_on_a_cpu_names_the_cpu_override(monkeypatch, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: tune runs for real")
    # the kernel families imported here first, in the interpreter: the refusal below runs with the
    # variable unset, and a family first imported then is compiled for a GPU for the rest of the
    # session (test_tune.py then fails when run after this file alone)
    import polytrace_kernels.attention  # noqa: F401
    import polytrace_kernels.logprob  # noqa: F401
    import polytrace_kernels.packing  # noqa: F401

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["tune", "pack", "--profile", "deepcoder-14b", "--budget-s", "1", "-q"]) == 2
    err = capsys.readouterr().err
    assert "polytrace tune pack --profile deepcoder-14b --allow-cpu" in err
    assert len(err.strip().splitlines()) == 1


def test_tune_allow_cpu_switches_the_interpreter_on_in_its_own_process(tmp_path):
    """From the command line, ``--allow-cpu`` sets TRITON_INTERPRET before triton is imported and
    the session runs (one bucket, a tiny budget); its output says the timings are no performance."""
    import os
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: tune runs for real")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    proc = subprocess.run([sys.executable, "-m", "polytrace", "tune", "pack", "--profile", "deepcoder-14b",
                           "--budget-s", "1", "--max-buckets", "1", "--allow-cpu", "-o", str(tmp_path / "t"),
                           "--json"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(proc.stdout)
    assert data["measured_on"] == "cpu-interpreter"
    assert "\r" not in proc.stderr  # no redrawn bar into a pipe
    assert list((tmp_path / "t").rglob("pack.json"))


def test_parser_builds():
    assert build_parser().prog == "polytrace"


# Floors a subcommand imports when it runs, never while the parser is built (`polytrace --help`
# paid ~25 ms of the profile code on the 2-core CI machine when workload_cmds imported describe).
_NOT_AT_START = ("polytrace.workload.profiles", "polytrace.workload.describe", "polytrace.stepmodel",
                 "polytrace.measure.results", "polytrace.logs", "polytrace.measure.ab", "polytrace.measure.bench",
                 "torch", "triton", "scipy", "matplotlib", "tabulate", "ray")


def test_building_the_parser_imports_no_subcommand_work():
    import subprocess
    import sys

    code = ("import sys; from polytrace.cli import build_parser; build_parser(); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {_NOT_AT_START!r} "
            f"or m.startswith({_NOT_AT_START!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _every_argument(parser, path=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _every_argument(sub, (*path, name))
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield " ".join(path), action


def test_every_flag_and_argument_has_help_text():
    arguments = list(_every_argument(build_parser()))
    assert len(arguments) > 100  # the walk reaches every subcommand
    from polytrace.cli._args import DeprecatedAlias

    missing = [f"{cmd}: {'/'.join(a.option_strings) or a.dest}" for cmd, a in arguments
               if not isinstance(a, DeprecatedAlias) and (not (a.help or "").strip() or a.help == "==SUPPRESS==")]
    assert not missing, missing


def test_estimate_prices_the_steps_asked_for(capsys):
    """``--steps 1-2`` prices steps 1 and 2; ``--steps 2`` and ``--step 2`` step 2 alone (it once
    meant "the first 2 steps" here: the note says so)."""
    import json

    argv = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--profile", "deepcoder-14b"]
    assert main([*argv, "--steps", "1-2", "--json"]) == 0
    assert [r["step"] for r in json.loads(capsys.readouterr().out)["rows"]] == [1, 2]
    assert main([*argv, "--steps", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert [r["step"] for r in json.loads(captured.out)["rows"]] == [2]
    assert "the first 2 steps are --steps 0-1" in captured.err
    assert main([*argv, "--step", "2", "--json"]) == 0
    assert [r["step"] for r in json.loads(capsys.readouterr().out)["rows"]] == [2]


def test_gate_plot_on_an_existing_file_fails_before_printing_a_report(tmp_path, capsys):
    from _results_synth import make_result, write

    base = write(tmp_path / "base.json", make_result(seed=1))
    cand = write(tmp_path / "cand.json", make_result(seed=2))
    not_a_folder = tmp_path / "plots"
    not_a_folder.write_text("x")
    assert main(["gate", str(base), str(cand), "-o", str(not_a_folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no report printed above the error
    assert captured.err.startswith("polytrace: error: -o ") and "not a folder" in captured.err
    assert not_a_folder.read_text() == "x"


def test_one_gpu_is_singular(capsys, validation_logs):
    assert main(["validate", str(validation_logs / "verl_qwen2.5-0.5b_ppo_1gpu_p512_r256.log")]) == 0
    out = capsys.readouterr().out
    assert ", 1 GPU (" in out and "1 GPUs" not in out


def test_counted():
    from polytrace.wording import counted

    assert [counted(n, "GPU") for n in (1, 2, 1000)] == ["1 GPU", "2 GPUs", "1,000 GPUs"]
    assert counted(1, "step") == "1 step" and counted(3, "batch", "batches") == "3 batches"
