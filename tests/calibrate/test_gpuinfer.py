"""A log's unstated GPU inferred from what its steps rule out (``polytrace/calibrate/gpuinfer.py``):
an assumed A100 that some step beats at its peak roofline gives way to the slowest preset none
does; a stated ``--gpu`` is never second-guessed; a log no preset fits keeps the assumption and
says the configuration is the likelier culprit."""

from __future__ import annotations

import dataclasses
import re

import pytest

from polytrace.calibrate.fit import StepData
from polytrace.calibrate.gpuinfer import ASSUMED_NOTE, CONTRADICTED_NOTE, INFER_LADDER, INFERRED_NOTE, roofline_margin
from polytrace.calibrate.gpuinfer import infer_gpu as gpu_search
from polytrace.calibrate.logconfig import Overrides
from polytrace.calibrate.mfu import MfuReading
from polytrace.errors import PolytraceError
from polytrace.stepmodel.efficiency import roofline_share

pytestmark = pytest.mark.filterwarnings("ignore")


def infer_gpu(path, overrides, prepared, prepare_on):
    """gpuinfer's decision, its requests acted on as ``validate.prepare`` does: each ``Overrides``
    it yields is priced by ``prepare_on`` and sent back; its return value is the decision."""
    search, trial = gpu_search(path, overrides, prepared), None
    while True:
        try:
            ask = search.send(trial)
        except StopIteration as done:
            return done.value
        assert isinstance(ask, Overrides) and ask.gpu in INFER_LADDER, ask
        trial = prepare_on(path, ask)


def _row(step, actual, fams):
    return StepData(step, {}, {**actual, "step": sum(actual.values())}, {}, families=fams)


def test_margin_is_the_worst_step_and_stage_over_its_peak_seconds():
    fams = {"gen": {("rollout", "gemm"): 2.0, ("rollout", "host"): 5.0},
            "update_actor": {("train", "gemm"): 1.0}}
    share = roofline_share("gemm")
    rows = [_row(1, {"gen": 3.0, "update_actor": 4.0}, fams), _row(2, {"gen": 1.0, "update_actor": 4.0}, fams)]
    # host work has no roofline: the bound is the GEMMs' peak seconds alone; step 2's gen is the worst
    assert roofline_margin(rows) == pytest.approx(1.0 / (2.0 * share))
    assert roofline_margin(rows, stages=["update_actor"]) == pytest.approx(4.0 / share)
    assert roofline_margin([_row(1, {"gen": 1.0}, {"gen": {("rollout", "host"): 1.0}})]) == float("inf")


@dataclasses.dataclass
class _Run:
    gpu: object


@dataclasses.dataclass
class _Gpu:
    slug: str


def _prepared(slug, margin, notes):
    """A prepared tuple whose one step sits at ``margin`` times its peak-roofline seconds."""
    share = roofline_share("gemm")
    rows = [_row(1, {"gen": margin * share}, {"gen": {("rollout", "gemm"): 1.0}})]
    return ("log", _Run(_Gpu(slug)), notes, rows, "split")


def test_the_slowest_preset_no_step_beats_is_taken_and_said():
    margins = {"h100-sxm": 0.8, "h200": 1.3, "b200": 2.0}  # the steps beat an H100's peak too
    tried = []

    def prepare_on(path, ov):
        tried.append(ov.gpu)
        return _prepared(ov.gpu, margins[ov.gpu], ["other note"])

    assumed = _prepared("a100-80g", 0.5, [f"{ASSUMED_NOTE} a100-80g (pass --gpu)", "kept"])
    log, run, notes, rows, split = infer_gpu("x.log", None, assumed, prepare_on)
    assert run.gpu.slug == "h200" and tried == ["h100-sxm", "h200"]
    assert notes[0].startswith(f"{INFERRED_NOTE} h200") and notes[1:] == ["other note"]
    assert re.search(r"rejected: a100-80g \(0\.50x its peak-roofline seconds\); h100-sxm \(0\.80x\)", notes[0])


def test_a_stated_gpu_or_one_the_steps_allow_is_kept():
    def never(path, ov):
        raise AssertionError("re-prepared")

    fine = _prepared("a100-80g", 1.2, [f"{ASSUMED_NOTE} a100-80g (pass --gpu)"])
    assert infer_gpu("x.log", None, fine, never) is fine
    stated = _prepared("a100-80g", 1.2, ["GPU: a100-80g from the log"])  # no assumption: nothing to infer
    assert infer_gpu("x.log", None, stated, never) is stated
    given = _prepared("a100-80g", 1.0, [f"{ASSUMED_NOTE} a100-80g (pass --gpu)"])
    assert infer_gpu("x.log", Overrides(gpu="a100-80g"), given, never) is given


def _ladder(margins):
    tried = []

    def prepare_on(path, ov):
        tried.append(ov.gpu)
        return _prepared(ov.gpu, margins[ov.gpu], [])
    return tried, prepare_on


@pytest.mark.parametrize("overrides, how", [(Overrides(gpu="a100-80g"), "(--gpu)"), (None, "(as the log states)")])
def test_a_given_gpu_the_steps_beat_is_kept_with_a_note_naming_both(overrides, how):
    """Issue 38: ``validate LOG --gpu a100-80g`` on a log some step of which beats the A100's peak
    roofline was priced silently (constants 3.44e-29 s). The GPU given or stated stays priced, and a
    note names it, by how much a step beats it, and the slowest preset the steps allow."""
    tried, prepare_on = _ladder({"h100-sxm": 0.8, "h200": 1.3, "b200": 2.0})
    given = _prepared("a100-80g", 0.5, ["GPU: a100-80g"])
    _log, run, notes, _rows, _split = infer_gpu("x.log", overrides, given, prepare_on)
    assert run.gpu.slug == "a100-80g" and tried == ["h100-sxm", "h200"]
    assert notes[0] == "GPU: a100-80g" and len(notes) == 2
    assert notes[1].startswith(f"{CONTRADICTED_NOTE}a100-80g {how}, but some step beats its peak roofline "
                               "(0.50x its seconds); the slowest of a100-80g, h100-sxm, h200, b200 no step beats "
                               "is h200 (also beaten: h100-sxm (0.80x))"), notes[1]
    _tried, beaten_all = _ladder({"h100-sxm": 0.8, "h200": 0.9, "b200": 0.95})
    note = infer_gpu("x.log", overrides, given, beaten_all)[2][-1]
    assert "every preset of a100-80g, h100-sxm, h200, b200 is beaten too" in note and "unstated settings" in note


def _reading(achieved):
    return MfuReading(983.0, (982.0, 985.0), 60, 989.0, ("h100-sxm", "h200"), achieved)


def test_a_gpu_slower_than_the_logs_own_flop_rate_is_refused(monkeypatch):
    """A ``--gpu`` whose bf16 peak (the A100's 312 TFLOP/s) is below the useful FLOP/s per GPU the
    log's update ran at by verl's own count, on even its slower steps (10th percentile 320), cannot
    be the GPU: refused, naming the file, the flag, both rates and the class the MFU reads. At a 10th
    percentile of 300 TFLOP/s (some steps within the peak) it is priced with the note."""
    import polytrace.calibrate.gpuinfer as gi

    tried, prepare_on = _ladder({"h100-sxm": 1.3, "h200": 1.3, "b200": 2.0})
    given = _prepared("a100-80g", 0.5, [])
    monkeypatch.setattr(gi, "read_mfu", lambda log, run: _reading((320.0, 350.0)))
    monkeypatch.setattr(gi, "check_gpu", lambda reading, gpu: None)
    with pytest.raises(PolytraceError) as err:
        infer_gpu("x.log", Overrides(gpu="a100-80g"), given, prepare_on)
    msg = str(err.value)
    assert msg.startswith("x.log: --gpu a100-80g: the log's update runs 320-350 TFLOP/s per GPU") and tried == []
    assert "past a100-80g's 312 TFLOP/s bf16 peak" in msg and "989 TFLOP/s class (h100-sxm, h200)" in msg
    monkeypatch.setattr(gi, "read_mfu", lambda log, run: _reading((300.0, 350.0)))
    notes = infer_gpu("x.log", Overrides(gpu="a100-80g"), given, prepare_on)[2]
    assert notes[-1].startswith(f"{CONTRADICTED_NOTE}a100-80g (--gpu)") and "is h100-sxm" in notes[-1]
    # a GPU only stated by the log is never refused: the log is what it is
    monkeypatch.setattr(gi, "read_mfu", lambda log, run: _reading((320.0, 350.0)))
    assert infer_gpu("x.log", None, given, prepare_on)[1].gpu.slug == "a100-80g"


def test_no_preset_fits_keeps_the_assumption_and_blames_the_configuration():
    def prepare_on(path, ov):
        return _prepared(ov.gpu, 0.3, [])

    assumed = _prepared("a100-80g", 0.1, [f"{ASSUMED_NOTE} a100-80g (pass --gpu)"])
    _log, run, notes, _rows, _split = infer_gpu("x.log", None, assumed, prepare_on)
    assert run.gpu.slug == "a100-80g"
    assert "every preset of " + ", ".join(INFER_LADDER) in notes[0] and "unstated settings" in notes[0]


def test_validate_infers_the_publishers_h100_for_a_log_that_beats_an_a100(validation_logs, monkeypatch):
    """The 8-GPU Qwen2-7B PPO log states no GPU; its publisher's README says H100s. Priced on an
    assumed A100 its trainer passes need stages under their peak roofline (and the calibration
    scored the step at 52.7%); the log's own MFU names the H100's class (verl's 989 TFLOP/s), and
    the steps alone reject the A100 too (a stage under its peak roofline there)."""
    import polytrace.calibrate.validate as v
    from polytrace.calibrate.gpuinfer import roofline_margin
    from polytrace.calibrate.validate import prepare, validate

    log = f"{validation_logs}/verl_qwen2-7b_ppo_8gpu_b1024x5.log"
    reads, priced = [], []
    real_read, real_prepare_on = v.read_log, v._prepare_on
    monkeypatch.setattr(v, "read_log", lambda p: reads.append(p) or real_read(p))
    monkeypatch.setattr(v, "_prepare_on", lambda lg, ov, w: priced.append(ov and ov.gpu) or real_prepare_on(lg, ov, w))
    res = validate(log)
    # read once, priced on the assumed A100 and then on the H100 the MFU names (issue 35: it was read twice)
    assert reads == [log] and priced == [None, "h100-sxm"], (reads, priced)
    monkeypatch.undo()
    assert res.config["gpu"] == "h100-sxm"
    note = next(n for n in res.notes if n.startswith(INFERRED_NOTE))
    assert "from the log's own MFU" in note and "989 TFLOP/s class" in note, note
    assert roofline_margin(prepare(log, Overrides(gpu="a100-80g"))[3]) < 1.0
    assert res.accuracy["step"]["accuracy"] >= 95.0, res.accuracy["step"]
    forced = validate(log, overrides=Overrides(gpu="a100-80g"))
    assert forced.config["gpu"] == "a100-80g" and not any(n.startswith(INFERRED_NOTE) for n in forced.notes)
    assert any("held at the peak roofline" in n for n in forced.notes)
    note = next(n for n in forced.notes if n.startswith(CONTRADICTED_NOTE))
    assert note.startswith(f"{CONTRADICTED_NOTE}a100-80g (--gpu), but some step beats its peak roofline (0.57x")
    assert "no step beats is h100-sxm" in note
    # the stages the A100 cannot hold keep exactly no constant seconds, never a solver's 1e-29
    consts = {k: v for k, v in forced.calibration["scalars"].items() if k.endswith("_overhead_s")}
    assert all(v == 0.0 or v >= 1e-3 for v in consts.values()), consts
    assert consts["update_critic_overhead_s"] == 0.0 and consts["old_log_prob_overhead_s"] == 0.0, consts


def test_validate_refuses_a_gpu_the_logs_flop_rate_rules_out(validation_logs, capsys):
    """The same log's update runs 230-267 TFLOP/s per GPU by verl's count: an A40 (149.7) is refused
    with one line and exit 2."""
    from polytrace.cli import main

    log = f"{validation_logs}/verl_qwen2-7b_ppo_8gpu_b1024x5.log"
    assert main(["validate", log, "--gpu", "a40"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"polytrace: error: {log}: --gpu a40: the log's update runs 230-267")
