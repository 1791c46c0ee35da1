"""Tuning sessions: a tiny budget in the Triton interpreter covers the search, the file format
the kernels read, and the fallbacks."""

from __future__ import annotations

import json

import pytest
import torch

from polytrace.errors import PolytraceError
from polytrace.measure.tuning import session as tune

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-interpreter path (GPU: test_gpu_session)")


@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYTRACE_TUNING_DIR", str(tmp_path))
    from polytrace_kernels import _tuning

    _tuning.clear_cache()
    yield tmp_path
    _tuning.clear_cache()


@cpu_only
def test_pack_session_writes_configs_the_kernel_reads(tuning_dir):
    from polytrace_kernels import _tuning
    from polytrace_kernels.packing import api

    session = tune.run_session("pack", target=tune.TuneTarget("deepcoder-14b"), budget_s=1.5, root=tuning_dir,
                               progress=False)
    path = tuning_dir / "cpu" / "pack.json"
    assert session.path == path and path.is_file()
    data = json.loads(path.read_text())
    assert data["kernel"] == "pack" and data["device_name"] == "cpu" and data["measured_on"] == "cpu-interpreter"
    assert set(data["configs"]) == {api.tuning_bucket(48, torch.float16), api.tuning_bucket(1, torch.float32)}
    space = api.TUNING_SPACE
    for bucket, entry in data["configs"].items():
        assert entry["tried"] >= 1 and entry["time_s"] <= entry["default_time_s"]
        launch = {k: v for k, v in entry.items() if k in space}
        assert all(v in space[k] for k, v in launch.items())
        # the launcher's lookup returns the stored config on this device, the default elsewhere
        default = {"BLOCK_T": -1, "BLOCK_F": -1, "num_warps": -1}
        got = _tuning.lookup("pack", bucket, "cpu", default)
        assert got == {**default, **launch}
        assert _tuning.lookup("pack", bucket, "NVIDIA H200", default) == default
    assert "tuned pack on CPU interpreter" in session.summary()


def test_wrong_outputs_are_never_chosen(tmp_path):
    """A candidate whose output differs from the default's is rejected, however fast it is."""
    calls = []

    def shapes(ctx):
        def build(device):
            def launch(config):
                calls.append(config)
                bad = config is not None and config["X"] == 2
                return torch.ones(4) * (2.0 if bad else 1.0)
            return launch
        return [tune.TuneShape("b0", "toy", 1.0, build)]

    toy = tune.Tunable("toy_kernel", "packing", "toy", "polytrace_kernels.packing.api", shapes,
                       fixed_space={"X": [1, 2, 3]})
    session = tune.run_session(toy, target=tune.TuneTarget("deepcoder-14b"), budget_s=30, root=tmp_path,
                               progress=False)
    assert session.failed == 1 and session.tried == 3
    assert session.data["configs"]["b0"].get("X") in (None, 1, 3)


@cpu_only
def test_merges_with_buckets_tuned_before(tmp_path):
    path = tmp_path / "cpu" / "pack.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"kernel": "pack", "device_name": "cpu", "configs": {"F9999-old": {"BLOCK_T": 4}}}))
    tune.run_session("pack", target=tune.TuneTarget("deepcoder-14b", max_buckets=1), budget_s=0.5, root=tmp_path,
                     progress=False)
    configs = json.loads(path.read_text())["configs"]
    assert configs["F9999-old"] == {"BLOCK_T": 4} and len(configs) == 2


def test_bad_arguments_name_themselves(tmp_path):
    with pytest.raises(PolytraceError, match="tunable kernel"):
        tune.run_session("nope", target=tune.TuneTarget("deepcoder-14b"), budget_s=1, root=tmp_path)
    with pytest.raises(PolytraceError, match="--budget-s"):
        tune.run_session("pack", target=tune.TuneTarget("deepcoder-14b"), budget_s=0, root=tmp_path)
    with pytest.raises(PolytraceError, match="profile"):
        tune.run_session("pack", target=tune.TuneTarget("no-such-profile"), budget_s=1, root=tmp_path)


def test_candidates_cover_the_space_in_seeded_order():
    space = {"A": [1, 2], "B": [3, 4, 5]}
    a, b = tune.candidate_configs(space, 0), tune.candidate_configs(space, 0)
    assert a == b and len(a) == 6 and {tuple(sorted(c.items())) for c in a} == {
        (("A", x), ("B", y)) for x in (1, 2) for y in (3, 4, 5)}


@cpu_only
def test_cli_tune(tmp_path, capsys):
    from _results_synth import cli_main

    code = cli_main(["tune", "pack", "--profile", "video-vl-7b", "--budget-s", "0.5", "--out", str(tmp_path),
                     "--no-progress", "--max-buckets", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "wrote" in out and (tmp_path / "cpu" / "pack.json").is_file()
    with pytest.raises(SystemExit) as exc:  # a usage error, reported by the parser
        cli_main(["tune", "pack", "--budget-s", "1"])
    assert exc.value.code == 2
    assert "--profile" in capsys.readouterr().err


@cpu_only
@pytest.mark.parametrize("name", tune.tunable_names())
def test_every_registered_kernel_tunes_in_the_interpreter(name, tmp_path):
    """Each registry entry drives its family's launcher with config= and keys the result by the
    family's own tuning_bucket (one bucket, a fraction of a second of search)."""
    import importlib

    t = tune.get_tunable(name)
    module = importlib.import_module(t.module)
    session = tune.run_session(name, target=tune.TuneTarget("search-r1-7b", max_buckets=1), budget_s=0.3,
                               root=tmp_path, progress=False)
    data = json.loads(session.path.read_text())
    assert data["kernel"] == name and data["family"] == t.family and len(data["configs"]) == 1
    (bucket, entry), = data["configs"].items()
    assert entry["tried"] >= 1 and session.failed == 0  # every candidate gives the default's output
    space = getattr(module, t.space_attr)
    assert {k for k in entry if k in space} in (set(), set(space))
    assert data["kernel_hash"] and data["measured_on"] == "cpu-interpreter"


@pytest.mark.gpu
def test_gpu_session_writes_configs_the_launcher_reads(tuning_dir):
    """On a GPU: a short real session for pack; the file is keyed by this device's name and the
    launcher's lookup returns the tuned config for the bucket."""
    from polytrace_kernels import _tuning

    session = tune.run_session("pack", target=tune.TuneTarget("deepcoder-14b", max_buckets=1), budget_s=8,
                               root=tuning_dir, progress=False)
    data = json.loads(session.path.read_text())
    name = torch.cuda.get_device_name()
    assert data["device_name"] == name and data["measured_on"] == "cuda" and session.failed == 0
    (bucket, entry), = data["configs"].items()
    assert entry["time_s"] <= entry["default_time_s"] and entry["tried"] >= 1
    tuned = {k: v for k, v in entry.items() if k in ("BLOCK_T", "BLOCK_F", "num_warps")}
    default = {"BLOCK_T": 1, "BLOCK_F": 1, "num_warps": 1}
    assert _tuning.lookup("pack", bucket, name, default) == {**default, **tuned}
