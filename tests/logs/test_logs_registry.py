"""Log formats as plug-ins (``polytrace/logs/formats.py``): the reader asks the registered formats
in order, and a new format is one module plus one registry line. The toy format of
``tests/_toy_log_format.py`` is registered here and ``validate`` reads a run through it to the
same configuration and numbers as the verl console log it was written from."""

from __future__ import annotations

import _toy_log_format as toy
import pytest
from _verl_logs import Run, write_log

from polytrace.calibrate.logconfig import Overrides
from polytrace.calibrate.validate import validate
from polytrace.errors import PolytraceError
from polytrace.logs import formats, read_log

SMALL = dict(steps=16, prompts=32, n=4, max_response=256, max_prompt=256, micro_per_gpu=4, mini_batch=16,
             test_freq=5, save_freq=10)


def test_the_registry_names_the_formats_in_the_order_they_are_asked():
    # the console format takes any text, so anything after it would never be asked
    assert formats.names() == ["notebook", "wandb-csv", "verl-console"]
    assert all(callable(f.sniff) and callable(f.read) for f in formats.FORMATS)


def test_each_format_is_chosen_by_its_sniff(tmp_path):
    csv = tmp_path / "run.csv"
    csv.write_text("_step,timing_s/gen,timing_s/step\n1,2.0,3.0\n2,2.5,3.5\n")
    assert read_log(csv).format == "wandb-csv"
    headed = tmp_path / "export.txt"  # no .csv name: the header line decides
    headed.write_text(csv.read_text())
    assert read_log(headed).format == "wandb-csv"
    console = tmp_path / "run.log"
    console.write_text("step:1 - timing_s/gen:2.0 - timing_s/step:3.0\n")
    assert read_log(console).format == "verl-console"


def test_a_registered_toy_format_is_read_by_validate(tmp_path, monkeypatch):
    run = Run(**SMALL)
    console = write_log(tmp_path / "run.log", run)
    path = toy.write(tmp_path / "run.jsonl", read_log(console))
    ov = Overrides(gpu="mi300x")
    # unregistered, the file is console text with no step lines: refused in one line
    with pytest.raises(PolytraceError, match="no training step lines"):
        read_log(path)
    monkeypatch.setattr(formats, "FORMATS", [toy, *formats.FORMATS])  # the one registry line
    log = read_log(path)
    assert log.format == "toy-jsonl" and len(log.steps) == len(read_log(console).steps)
    assert read_log(console).format == "verl-console"  # the toy sniff says no to other files
    got, want = validate(path, overrides=ov), validate(console, overrides=ov)
    assert "read as the toy format, version 1" in got.notes
    assert got.config == want.config
    for stage, acc in want.accuracy.items():
        assert got.accuracy[stage] == acc, stage
