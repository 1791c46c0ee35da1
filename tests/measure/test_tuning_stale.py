"""Tuned configs for other kernel code are not applied (issue 17, item 6): ``kernels/_tuning.py``
checks the file's kernel hash against the family's current source at launch."""

from __future__ import annotations

import json
import warnings

import pytest

from polytrace.provenance import kernel_source_hash

BUCKET = "F48-float16"
DEFAULT = {"BLOCK_T": 64, "BLOCK_F": 64, "num_warps": 4}
TUNED = {"BLOCK_T": 128, "num_warps": 8, "time_s": 1e-5, "default_time_s": 2e-5}


@pytest.fixture
def tuning(tmp_path, monkeypatch):
    from polytrace_kernels import _tuning

    monkeypatch.setenv("POLYTRACE_TUNING_DIR", str(tmp_path))
    _tuning.clear_cache()

    def write(**fields):
        data = {"kernel": "pack", "family": "packing", "device_name": "NVIDIA H200", "gpu_slug": "h200",
                "configs": {BUCKET: TUNED}, **fields}
        data = {k: v for k, v in data.items() if v is not None}
        (tmp_path / "h200").mkdir(exist_ok=True)
        (tmp_path / "h200" / "pack.json").write_text(json.dumps(data))
        _tuning.clear_cache()
        return tmp_path / "h200" / "pack.json"

    yield _tuning, write
    _tuning.clear_cache()


@pytest.mark.parametrize("family", ["logprob", "attention", "packing"])
def test_the_kernels_hash_is_the_one_polytrace_records(family):
    from polytrace_kernels import _tuning

    assert _tuning.family_source_hash(family) == kernel_source_hash(family) != ""


def test_current_hash_applies_the_tuned_config_silently(tuning):
    _tuning, write = tuning
    write(kernel_hash=kernel_source_hash("packing"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _tuning.lookup("pack", BUCKET, "NVIDIA H200", DEFAULT)
    assert got == {"BLOCK_T": 128, "BLOCK_F": 64, "num_warps": 8}


@pytest.mark.parametrize("recorded", ["0123456789abcdef", "", None])
def test_stale_or_missing_hash_is_ignored_with_a_warning(tuning, recorded):
    """Before the check, a config tuned for other code was applied (BLOCK_T 128 here)."""
    _tuning, write = tuning
    path = write(kernel_hash=recorded)
    with pytest.warns(RuntimeWarning) as caught:
        got = _tuning.lookup("pack", BUCKET, "NVIDIA H200", DEFAULT)
    assert got == DEFAULT
    (w,) = caught
    message = str(w.message)
    assert str(path) in message and "'pack'" in message and "polytrace tune pack" in message
    if recorded:
        assert recorded in message and kernel_source_hash("packing") in message
    # read once per process: later launches neither re-read the file nor warn again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _tuning.lookup("pack", BUCKET, "NVIDIA H200", DEFAULT) == DEFAULT


@pytest.mark.parametrize("bad", [{"BLOCK_T": "128"}, {"BLOCK_T": 96}, {"BLOCK_T": -4}, {"num_warps": 3},
                                 {"num_warps": 64}, {"BLOCK_F": True}, {"BLOCK_F": 2 ** 40}, {"BLOCK_T": 128.0}])
def test_a_tuned_value_no_launch_could_take_is_ignored_with_a_warning(tuning, bad):
    """A hand-edited or damaged tuned config reached the Triton launch as it was (a string or a
    non-power-of-two block size: an error deep inside Triton); now the default runs, said once."""
    _tuning, write = tuning
    path = write(kernel_hash=kernel_source_hash("packing"))
    data = json.loads(path.read_text())
    data["configs"][BUCKET] = {**TUNED, **bad}
    path.write_text(json.dumps(data))
    _tuning.clear_cache()
    with pytest.warns(RuntimeWarning) as caught:
        got = _tuning.lookup("pack", BUCKET, "NVIDIA H200", DEFAULT)
    assert got == DEFAULT
    (w,) = caught
    (key,) = bad
    assert str(path) in str(w.message) and f"{key} = " in str(w.message) and "polytrace tune pack" in str(w.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _tuning.lookup("pack", BUCKET, "NVIDIA H200", DEFAULT) == DEFAULT


def test_unknown_family_is_stale(tuning):
    _tuning, write = tuning
    write(family="../../etc", kernel_hash=kernel_source_hash("packing"))
    with pytest.warns(RuntimeWarning, match="polytrace tune pack"):
        assert _tuning.lookup("pack", BUCKET, "NVIDIA H200", DEFAULT) == DEFAULT


def test_another_device_is_not_read_and_not_warned_about(tuning):
    _tuning, write = tuning
    write(kernel_hash="stale")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _tuning.lookup("pack", BUCKET, "NVIDIA H100 80GB HBM3", DEFAULT) == DEFAULT
