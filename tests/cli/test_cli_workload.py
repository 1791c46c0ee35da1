"""The workload subcommands end to end: output, JSON, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from polytrace.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_profiles_lists_every_builtin(capsys):
    code, out, _ = run(capsys, "profiles", "--json")
    assert code == 0
    names = [r["name"] for r in json.loads(out)]
    assert names == ["dapo-math-32b", "deepcoder-14b", "video-vl-7b", "search-r1-7b", "model-b-math",
                     "model-b-tooluse"]


def test_describe_profile_json_and_table(capsys):
    code, out, _ = run(capsys, "describe", "deepcoder-14b", "--steps", "0-2", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["steps"] == [0, 1, 2] and d["summary"]["cap_share"] > 0.05
    code, out, _ = run(capsys, "describe", "search-r1-7b", "--steps", "0")
    assert code == 0 and "tool calls per trajectory" in out and "(sampled)" in out


def test_fit_then_use_the_fitted_profile(tmp_path, capsys):
    trace = tmp_path / "packed_lengths_step_0.jsonl"
    lines = [json.dumps({"step": s, "input": 100 + g, "output": [50 + g, 60 + g * 3, 400, 70], "n_sampling": 4})
             for s in range(2) for g in range(12)]
    trace.write_text("\n".join(lines) + "\n")
    out_path = tmp_path / "mine.json"
    code, out, _ = run(capsys, "fit", str(trace), "-o", str(out_path))
    assert code == 0 and out_path.exists() and "12 prompts x 4" in out
    code, out, _ = run(capsys, "describe", str(out_path), "--json")
    assert code == 0 and json.loads(out)["name"] == "packed_lengths_step_0"  # the trace's name, as --help says
    code, out, _ = run(capsys, "fidelity", str(out_path), str(trace), "--json", "--replicas", "2")
    assert code == 0 and json.loads(out)["pooled"]["ks"] < 0.3


@pytest.mark.parametrize("argv,needle", [
    (["describe", "nope"], "neither a built-in profile"),
    (["fidelity", "nope", "x"], "unknown profile 'nope'; valid profiles: dapo-math-32b"),
    (["describe", "dapo-math-32b", "--drift", "bogus"], "valid drift presets"),
])
def test_bad_names_are_one_line_errors(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code != 0 and needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_trace_does_not_overwrite_existing_output(tmp_path, capsys):
    bad = tmp_path / "packed_lengths_step_0.jsonl"
    bad.write_text('{"step": 0, "input": 10, "output": [1, 2], "n_sampling": 2}\n{"step": 0, "input": -4, '
                   '"output": [1, 2], "n_sampling": 2}\n')
    out_path = tmp_path / "keep.json"
    out_path.write_text("precious")
    code, _, err = run(capsys, "fit", str(bad), "-o", str(out_path))
    assert code != 0 and f"{bad}:2:" in err
    assert out_path.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".keep")] == []


def test_fit_creates_missing_folders_and_names_a_file_in_the_way(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"step": 0, "input": 5, "output": [3, 4], "n_sampling": 2}) + "\n")
    code, _, err = run(capsys, "fit", str(trace), "-o", str(tmp_path / "no" / "such" / "p.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "no" / "such" / "p.json").read_text())["format"]
    (tmp_path / "file").write_text("x")
    code, _, err = run(capsys, "fit", str(trace), "-o", str(tmp_path / "file" / "p.json"))
    assert code == 2 and "cannot create folder" in err and err.count("\n") == 1


def test_bad_argument_values_exit_nonzero(capsys):
    with pytest.raises(SystemExit) as info:
        main(["describe", "dapo-math-32b", "--steps", "x-y"])
    assert info.value.code == 2
    assert "steps must look like" in capsys.readouterr().err


def test_no_traceback_from_the_console_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "polytrace", "describe", str(tmp_path / "missing.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("polytrace: error:") and "Traceback" not in proc.stderr


def test_describe_per_step_prints_plain_numbers(capsys):
    """Counts with thousands separators and shares as percentages, never 9.38e+03."""
    code, out, _ = run(capsys, "describe", "dapo-math-32b", "--steps", "0-1", "--per-step")
    assert code == 0
    table = out.split("resp max", 1)[1]
    assert "e+" not in table and "e-" not in table
    rows = [ln.split() for ln in table.splitlines()[2:] if ln.strip()]
    assert [r[0] for r in rows] == ["0", "1"]
    assert all("," in r[2] and r[-1].endswith("%") for r in rows)  # tokens per step > 1,000; rollout tail


def test_a_malformed_profile_names_the_missing_field(tmp_path, capsys):
    from polytrace.workload.profiles import get_profile

    doc = get_profile("dapo-math-32b").to_json()
    del doc["name"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    code, _, err = run(capsys, "describe", str(path))
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: malformed profile: missing field 'name'" in err
