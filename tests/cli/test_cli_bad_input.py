"""User mistakes on every subcommand: one line ``polytrace: error: ...`` naming the file, line or
argument, exit 2, no traceback, and no output lost or half-written. Each case here failed before
(a traceback, a multi-line usage dump, a hang on a huge number, or a silent success)."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys

import pytest
from _results_synth import make_result

from polytrace.cli import main


def run(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit 2 from inside parse_args
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, needle):
    assert code == 2, err
    assert err.startswith("polytrace: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert needle in err, err


@pytest.fixture
def scratch(tmp_path):
    """Bad and good input files; returns a dict name -> path (str)."""
    files = {}

    def put(name, text):
        path = tmp_path / name
        path.write_text(text if isinstance(text, str) else json.dumps(text))
        files[name] = str(path)

    put("base.json", make_result(seed=1))
    put("huge.jsonl", '{"step": 0, "input": 5, "output": [1e400, 3], "n_sampling": 2}\n')
    put("native_bad_header.jsonl", '{"format": "polytrace.workload.trace", "version": 1, "kind": "single", '
                                   '"max_response_len": "lots"}\n{"step": 0, "prompt_len": 5, "responses": [3]}\n')
    put("native_overflow.jsonl", '{"format": "polytrace.workload.trace", "version": 1, "kind": "single", '
                                 '"max_response_len": 8}\n{"step": 0, "prompt_len": 5, "responses": [1e400]}\n')
    bad_machine = make_result(seed=3)
    bad_machine["machine_info"] = "h200"
    put("bad_machine.json", bad_machine)
    bad_stats = make_result(seed=3)
    bad_stats["benchmarks"][0]["stats"] = "fast"
    put("bad_stats.json", bad_stats)
    no_raw = make_result(seed=3)
    for b in no_raw["benchmarks"]:
        del b["stats"]["data"]
    put("no_raw.json", no_raw)
    no_bench = make_result(seed=3)
    no_bench["benchmarks"] = []
    put("no_bench.json", no_bench)
    put("trace.jsonl", "".join(json.dumps({"step": 0, "input": 10 + g, "output": [5, 9, 40], "n_sampling": 3}) + "\n"
                               for g in range(8)))
    put("a_file.txt", "precious")
    (tmp_path / "empty_dir").mkdir()
    files["empty_dir"] = str(tmp_path / "empty_dir")
    files["tmp"] = str(tmp_path)
    return files


# (argv with {name} placeholders from the scratch fixture, text the one-line error must contain)
CASES = [
    # argparse value types: one line, not a usage dump; huge values refused before any work
    (["describe", "dapo-math-32b", "--steps", "0-10000000000000000000000"], "too many steps"),
    (["describe", "dapo-math-32b", "--steps", "0-200:-1"], "stride after ':' must be positive"),
    (["fidelity", "dapo-math-32b", "{trace.jsonl}", "--replicas", "5000"], "--replicas: '5000' replicas is too many"),
    (["estimate", "--model", "qwen2.5-7b", "--gpu", "h200", "--gpus", "10" * 13], "--gpus: '1010"),
    (["estimate", "--model", "qwen2.5-7b", "--gpu", "h200", "--gpus", "8", "--steps", "0-20000"], "too many steps"),
    (["estimate", "--model", "qwen2.5-7b", "--gpu", "h200"], "estimate: the following arguments are required: --gpus"),
    (["estimate", "--model", "qwen2.5-7b", "--gpu", "h200", "--gpus", "8", "--mem-fraction", "x"],
     "--mem-fraction: expected a number, got 'x'"),
    (["pack-compare", "dapo-math-32b", "--gpus", "many"], "--gpus: expected a positive integer, got 'many'"),
    (["pack-compare", "dapo-math-32b", "--gpus", "100000000"], "--gpus: '100000000' GPUs is too many"),
    (["pack-compare", "dapo-math-32b", "--gpus", "0"], "--gpus: expected a positive integer, got '0'"),
    (["gate", "{base.json}", "{base.json}", "--alpha", "x"], "--alpha: expected a number, got 'x'"),
    (["gate", "{base.json}", "{base.json}", "--json", "--markdown"], "not allowed with argument --json"),
    (["tune", "token_logprobs", "--profile", "dapo-math-32b", "--budget-s", "nan"], "--budget-s: expected a finite"),
    (["results", "nope"], "invalid choice: 'nope'"),
    # traces: non-finite numbers and malformed native headers name the file and line
    (["describe", "{huge.jsonl}"], "huge.jsonl:1: response length must be an integer, got inf"),
    (["describe", "{native_bad_header.jsonl}"], "native_bad_header.jsonl:1: invalid native header"),
    (["describe", "{native_overflow.jsonl}"], "native_overflow.jsonl:2: malformed record"),
    # output paths
    (["fit", "{trace.jsonl}", "-o", "{empty_dir}"], "empty_dir: is a folder; give a file name"),
    (["results", "store", "{base.json}", "--root", "{a_file.txt}"], "--root: cannot create folder"),
    (["results", "set-baseline", "{base.json}", "--root", "{a_file.txt}"], "--root: cannot create folder"),
    # result files that are not what they claim
    (["results", "show", "{bad_machine.json}"], "bad_machine.json: 'machine_info' must be an object"),
    (["gate", "{base.json}", "{bad_machine.json}"], "bad_machine.json: 'machine_info' must be an object"),
    (["results", "show", "{bad_stats.json}"], "bad_stats.json: benchmark 'test_token_logprobs"),
    (["results", "store", "{no_bench.json}", "--root", "{tmp}/store"], "no_bench.json: holds no benchmarks"),
    (["results", "set-baseline", "{no_bench.json}", "--root", "{tmp}/store"], "no benchmarks"),
    (["results", "set-baseline", "{no_raw.json}", "--root", "{tmp}/store"], "no raw rounds"),
    (["results", "set-baseline", "{empty_dir}", "--root", "{tmp}/store"], "empty_dir: folder holds no *.json"),
    (["plot", "{no_bench.json}", "-o", "{tmp}/plots"], "no_bench.json: no timed benchmarks"),
    # names that look like paths
    (["estimate", "--model", "{tmp}/missing.json", "--gpu", "h200", "--gpus", "8"], "no such model config file"),
    (["estimate", "--model", "{empty_dir}", "--gpu", "h200", "--gpus", "8"], "folder holds no config.json"),
    # an empty name is no folder (Path("") is "."): the flag, the value and where the names are
    (["estimate", "--model", "", "--gpu", "h200", "--gpus", "8"],
     "--model '': empty; give a preset (polytrace presets models)"),
    (["validate", "{empty_dir}"], "empty_dir: is a folder; expected a verl console log"),
]


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_error(scratch, capsys, argv, needle):
    code, out, err = run(capsys, [re.sub(r"\{([^}]+)\}", lambda m: scratch[m.group(1)], a) for a in argv])
    assert_one_line_error(code, err, needle)
    assert not os.path.exists(os.path.join(scratch["tmp"], "store"))  # nothing written on refusal
    assert not os.path.exists(os.path.join(scratch["tmp"], "plots"))


def test_plot_checks_every_input_before_writing(scratch, capsys):
    out_dir = os.path.join(scratch["tmp"], "plots")
    code, _, err = run(capsys, ["plot", scratch["base.json"], scratch["no_bench.json"], "-o", out_dir])
    assert_one_line_error(code, err, "no timed benchmarks")
    assert not os.path.exists(out_dir)  # the good file's PNGs were not written either


def test_failed_baseline_keeps_the_existing_one(scratch, capsys):
    root = os.path.join(scratch["tmp"], "store")
    code, _, _ = run(capsys, ["results", "set-baseline", scratch["base.json"], "--root", root])
    assert code == 0
    baseline = os.path.join(root, "baselines", "h200.json")
    before = open(baseline).read()
    code, _, err = run(capsys, ["results", "set-baseline", scratch["no_raw.json"], "--root", root])
    assert_one_line_error(code, err, "no raw rounds")
    assert open(baseline).read() == before


def test_write_failure_keeps_the_old_output_and_no_temp_file(scratch, capsys, monkeypatch):
    out = os.path.join(scratch["tmp"], "a_file.txt")

    def disk_full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    code, _, err = run(capsys, ["fit", scratch["trace.jsonl"], "-o", out])
    assert_one_line_error(code, err, "a_file.txt: cannot write: No space left on device")
    assert open(out).read() == "precious"
    assert [n for n in os.listdir(scratch["tmp"]) if n.endswith(".tmp")] == []


def test_unwritable_output_folder(scratch, capsys, monkeypatch):
    import tempfile

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    out = os.path.join(scratch["tmp"], "p.json")
    code, _, err = run(capsys, ["fit", scratch["trace.jsonl"], "-o", out])
    assert_one_line_error(code, err, "p.json: cannot write in")
    assert not os.path.exists(out)


def test_usage_error_from_the_console_has_no_traceback_and_one_line():
    proc = subprocess.run([sys.executable, "-m", "polytrace", "describe", "dapo-math-32b", "--steps",
                           "0-99999999999999999999"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("polytrace: error: describe: argument --steps:"), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
