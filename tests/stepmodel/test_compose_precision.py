"""FP8 engines and trainers (``--rollout-precision``, ``--train-precision``): what each changes in
the price, and nothing else.

An FP8 engine (vLLM ``quantization="fp8"``) holds and reads its linear layers at one byte a weight,
keeps the embedding and LM head 16-bit, and multiplies on FP8 tensor cores where the GPU has them
(twice the dense bf16 rate on Hopper, Ada and Blackwell datasheets); on Ampere it runs weight-only
(the bytes halve, the math stays bf16). An FP8 trainer (Transformer Engine) runs its GEMMs at the
FP8 peak; attention, optimizer and the weights the refit moves stay as they were.
"""

from __future__ import annotations

import dataclasses

import pytest

from polytrace.cli import main
from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.stepmodel.rollout import decode_weight_bytes, engine_gemm_rate, kv_capacity_tokens

pytestmark = pytest.mark.filterwarnings("ignore")


def _fp8(model):
    return dataclasses.replace(model, weight_dtype="fp8")


@pytest.mark.parametrize("name", ["qwen2.5-7b", "llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3"])
def test_an_fp8_engine_holds_its_linear_layers_at_one_byte(name):
    m = get_model(name)
    tables = m.embedding_params + (0 if m.tied_embeddings else m.lm_head_params)
    assert m.weight_bytes() == 2.0 * m.params_total  # bf16: every parameter two bytes, as before
    assert _fp8(m).weight_bytes() == (m.params_total - tables) * 1.0 + 2.0 * tables
    assert _fp8(m).weight_bytes(dtype_bytes=2) == m.weight_bytes()  # an explicit width wins


@pytest.mark.parametrize("name", ["qwen2.5-7b", "qwen3-30b-a3b", "deepseek-v3"])
@pytest.mark.parametrize("active", [1, 16, 256])
def test_decode_reads_the_linear_layers_at_the_engines_width(name, active):
    """The LM head (or the tied table it reads) stays 16-bit; everything else the iteration
    reads from the weights halves, the looked-up embedding rows too stay 16-bit."""
    m = get_model(name)
    bf16, fp8 = float(decode_weight_bytes(m, active)), float(decode_weight_bytes(_fp8(m), active))
    fixed = 2.0 * m.lm_head_params + 2.0 * m.hidden * active
    assert fp8 - fixed == pytest.approx((bf16 - fixed) / 2, rel=1e-12)


def test_decode_counts_only_the_routed_layers_experts():
    """DeepSeek-V3's first three layers are dense: at one running sequence the untouched routed
    experts of its 58 routed layers are not read; its dense layers' MLPs, the shared experts and
    the routers are."""
    m = get_model("deepseek-v3")
    one = float(decode_weight_bytes(m, 1))
    per_expert = 3 * m.hidden * m.moe_intermediate
    untouched = 58 * (m.experts - m.active_experts) * per_expert
    assert one == pytest.approx(2.0 * (m.params_total - untouched) - 2.0 * m.embedding_params + 2.0 * m.hidden,
                                rel=1e-9)


def test_fp8_tensor_cores_double_the_rate_and_ampere_runs_weight_only():
    h100, a100 = get_gpu("h100"), get_gpu("a100-80g")
    m = get_model("qwen2.5-7b")
    assert engine_gemm_rate(h100, _fp8(m)) == 2 * h100.ceiling("bf16") == h100.ceiling("fp8")
    assert engine_gemm_rate(h100, m) == h100.ceiling("bf16")
    assert engine_gemm_rate(a100, _fp8(m)) == a100.ceiling("bf16")  # no FP8 tensor cores: bf16 math
    with pytest.raises(ValueError, match="no FP8 tensor cores"):
        a100.ceiling("fp8")


def test_an_fp8_engine_leaves_the_saved_bytes_to_the_kv_cache():
    m, g = get_model("qwen2.5-7b"), get_gpu("h100")
    saved = (m.weight_bytes() - _fp8(m).weight_bytes()) / 2
    gained = kv_capacity_tokens(_fp8(m), g, 2, 0.5) - kv_capacity_tokens(m, g, 2, 0.5)
    assert gained == pytest.approx(saved / m.kv_bytes_per_token_per_gpu(2), rel=1e-12)


def _estimate(capsys, *extra, model="qwen2.5-7b", gpu="h100"):
    argv = ["estimate", "--model", model, "--gpu", gpu, "--gpus", "8", "--prompts", "32", "--rollout-tp", "2",
            "--json", *extra]
    assert main(argv) == 0
    import json

    return json.loads(capsys.readouterr().out)


def test_each_side_moves_only_its_own_stages(capsys):
    base = _estimate(capsys)
    roll = _estimate(capsys, "--rollout-precision", "fp8")
    train = _estimate(capsys, "--train-precision", "fp8")
    b, r, t = (x["summary"]["mean_stages_s"] for x in (base, roll, train))
    # an FP8 engine: generation cheaper, but not past half (host work, attention and KV reads stay)
    assert 0.5 * b["gen"] < r["gen"] < 0.95 * b["gen"]
    assert {k: r[k] for k in b if k != "gen"} == {k: b[k] for k in b if k != "gen"}
    # an FP8 trainer: every trainer pass cheaper (their GEMMs at twice the rate), generation the same
    assert t["gen"] == b["gen"]
    for stage in ("old_log_prob", "ref", "update_actor"):
        assert 0.5 * b[stage] < t[stage] < b[stage], stage
    assert roll["config"]["rollout_precision"] == "fp8" and train["config"]["train_precision"] == "fp8"


def test_an_ampere_fp8_engine_saves_bytes_not_flops(capsys):
    base = _estimate(capsys, gpu="a100-80g")["summary"]["mean_stages_s"]
    roll = _estimate(capsys, "--rollout-precision", "fp8", gpu="a100-80g")["summary"]["mean_stages_s"]
    assert roll["gen"] < base["gen"]


def test_the_text_says_which_side_runs_fp8(capsys):
    argv = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--prompts", "32"]
    assert main(argv + ["--rollout-precision", "fp8"]) == 0
    head = [x for x in capsys.readouterr().out.splitlines() if " | qwen2.5-7b | " in x][0]
    assert "| rollout fp8 |" in head and "train fp8" not in head
    assert main(argv) == 0
    head = [x for x in capsys.readouterr().out.splitlines() if " | qwen2.5-7b | " in x][0]
    assert "fp8" not in head


def test_a_calibrated_fp8_run_is_estimated_as_fp8(capsys, tmp_path):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--stage-times", "gen=60,old_log_prob=5,ref=5,update_actor=20", "--model",
                 "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--rollout-precision", "fp8", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["estimate", "--calibration", str(out), "--gpus", "16", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["rollout_precision"] == "fp8" and doc["config"]["train_precision"] == "bf16"


@pytest.mark.parametrize("extra, match", [
    (["--train-precision", "fp8", "--gpu", "a100-80g"], "a100-80g has no FP8 tensor cores"),
    (["--rollout-precision", "fp16", "--gpu", "h100"], "--rollout-precision"),
    (["--train-precision", "int8", "--gpu", "h100"], "--train-precision"),
])
def test_bad_precisions_are_one_line_errors(capsys, extra, match):
    try:  # argparse's own refusals exit from inside main
        rc = main(["estimate", "--model", "qwen2.5-7b", "--gpus", "8", "--prompts", "32", *extra])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err and "Traceback" not in err


def test_the_run_config_refuses_an_unknown_precision():
    from polytrace.errors import PolytraceError
    from polytrace.stepmodel.stages import RunConfig

    m, g = get_model("qwen2.5-7b"), get_gpu("h100")
    with pytest.raises(PolytraceError, match="rollout_precision"):
        RunConfig(m, g, 8, 32, 8, 512, 512, rollout_precision="fp4")
    with pytest.raises(PolytraceError, match="FP8 training"):
        RunConfig(m, get_gpu("a100-80g"), 8, 32, 8, 512, 512, train_precision="fp8")
    cfg = RunConfig(m, g, 8, 32, 8, 512, 512, rollout_precision="fp8")
    assert cfg.engine_model.weight_dtype == "fp8" and cfg.model.weight_dtype == "bf16"
    assert cfg.engine_model.weight_bytes() == _fp8(m).weight_bytes() < m.weight_bytes()


# --- verl's key: actor_rollout_ref.rollout.quantization ------------------------------------------

QUANT = "actor_rollout_ref.rollout.quantization"


@pytest.mark.parametrize("text, want", [("fp8", "fp8"), ("FP8", "fp8"), ("null", "bf16"), ("None", "bf16")])
def test_set_reads_verls_quantization(text, want):
    from polytrace.calibrate.settings import estimate_arguments, parse_settings

    got = parse_settings([f"{QUANT}={text}"])
    assert got == {QUANT: want}
    assert estimate_arguments(got) == ({"rollout_precision": want}, {})


@pytest.mark.parametrize("text", ["torchao", "int4", "fp16", "fp8x"])
def test_set_refuses_a_quantization_it_does_not_price(text):
    from polytrace.calibrate.settings import SettingError, parse_settings

    with pytest.raises(SettingError, match="expected fp8 or null") as exc:
        parse_settings([f"{QUANT}={text}"])
    assert "\n" not in str(exc.value)


def test_estimate_set_quantization_is_the_flag(capsys):
    by_set = _estimate(capsys, "--set", f"{QUANT}=fp8")
    by_flag = _estimate(capsys, "--rollout-precision", "fp8")
    assert by_set["config"]["rollout_precision"] == "fp8"
    assert by_set["summary"]["mean_stages_s"] == by_flag["summary"]["mean_stages_s"]
    argv = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--prompts", "32",
            "--rollout-precision", "fp8", "--set", f"{QUANT}=null"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "contradicts --rollout-precision fp8" in err and "\n" not in err


@pytest.mark.parametrize("value, want, noted", [("fp8", "fp8", False), ("null", "bf16", False),
                                                ("torchao", "bf16", True)])
def test_a_logs_quantization_prices_its_engine(tmp_path, value, want, noted):
    from _settings_logs import SETTINGS, model_log

    from polytrace.calibrate.logconfig import Overrides, config_from_log
    from polytrace.logs import read_log

    path = model_log(tmp_path / "run.log", dict(SETTINGS, **{QUANT: value}), steps=4, gpu="h100")
    run, notes = config_from_log(read_log(path), Overrides(gpu="h100"))
    assert run.rollout_precision == want
    assert any("quantization 'torchao' not priced" in n for n in notes) == noted
    if want == "bf16" and not noted:  # null: the same engine as a log that never states the key
        plain, _ = config_from_log(read_log(model_log(tmp_path / "plain.log", dict(SETTINGS), steps=4, gpu="h100")),
                                   Overrides(gpu="h100"))
        assert plain.rollout_precision == "bf16"


def test_set_quantization_on_a_log(tmp_path):
    from _settings_logs import SETTINGS, model_log

    from polytrace.calibrate.logconfig import Overrides, config_from_log
    from polytrace.calibrate.settings import given_settings
    from polytrace.logs import read_log

    log = read_log(model_log(tmp_path / "run.log", dict(SETTINGS), steps=4, gpu="h100"))
    over = Overrides(gpu="h100", settings={QUANT: "fp8"})
    run, _ = config_from_log(given_settings(log, over), over)
    assert run.rollout_precision == "fp8"


def test_a_separate_fp8_rollout_fits_where_bf16_does_not(capsys):
    """One rollout GPU cannot serve Qwen2.5-32B in bf16 (65.5 GB of weights at --mem-fraction 0.9 leave
    too little cache for a 34,816-token sequence); in FP8 (34.3 GB) it can, and its TP is chosen on
    the FP8 weights."""
    argv = ["estimate", "--model", "qwen2.5-32b", "--gpu", "h100", "--gpus", "16", "--mode", "one-step-off",
            "--rollout-gpus", "1", "--prompts", "16", "--mem-fraction", "0.9", "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot hold qwen2.5-32b" in err and "65.5 GB of weights per GPU" in err
    assert main(argv + ["--rollout-precision", "fp8"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["mode"]["rollout_gpus"] == 1 and doc["config"]["rollout_precision"] == "fp8"


@pytest.mark.parametrize("field, value", [("rollout_precision", "fp16"), ("train_precision", 8),
                                          ("rollout_precision", "")])
def test_a_hand_edited_precision_in_a_calibration_is_one_line(capsys, tmp_path, field, value):
    import json

    out = tmp_path / "cal.json"
    assert main(["calibrate", "--stage-times", "gen=60,old_log_prob=5,ref=5,update_actor=20", "--model",
                 "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "-o", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    doc["config"][field] = value
    out.write_text(json.dumps(doc))
    assert main(["estimate", "--calibration", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    flag = "--" + field.replace("_", "-")
    assert err == (f"polytrace: error: --calibration {out}: config.{field} is {value!r} (the setting {flag} must be "
                   f"one of bf16, fp8)")


def test_a_gemm_what_if_reaches_fp8_gemms_too(capsys):
    """FP8 GEMMs are priced at their roofline (the suite times bf16), and ``--speedup gemm=2``
    halves them as it halves any roofline-priced GEMM: on both sides, the label says why."""
    fp8 = ["--rollout-precision", "fp8", "--train-precision", "fp8"]
    base = _estimate(capsys, *fp8)
    fast = _estimate(capsys, *fp8, "--speedup", "gemm=2")
    for stage in ("gen", "update_actor"):
        b = base["summary"]["kernels"][stage]["gemm"]
        f = fast["summary"]["kernels"][stage]["gemm"]
        assert f["s"] == pytest.approx(b["s"] / 2, rel=1e-9), stage
        assert "GEMM suite times bf16" in b["source"], b


@pytest.mark.parametrize("flag", ["--rollout-precision", "--train-precision"])
def test_calibrating_a_log_refuses_a_precision_flag(capsys, tmp_path, flag):
    """A log states its engine's precision (verl's quantization key, or --set it): the
    --stage-times flag on a log is one line, exit 2, not silently ignored."""
    from _settings_logs import SETTINGS, model_log

    path = model_log(tmp_path / "run.log", dict(SETTINGS), steps=4, gpu="h100")
    assert main(["calibrate", path, "--gpu", "h100", flag, "fp8", "-o", str(tmp_path / "cal.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"polytrace: error: calibrate: {flag} applies to --stage-times; a log states its own"
    assert not (tmp_path / "cal.json").exists()
