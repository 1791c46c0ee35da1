"""``polytrace presets``: every GPU and model preset --gpu / --model accepts, each with its source."""

from __future__ import annotations

import json

from polytrace.cli import main
from polytrace.run.hardware import GPUS
from polytrace.run.models import list_models


def test_presets_list_every_gpu_and_model_with_a_source(capsys):
    assert main(["presets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [g["name"] for g in data["gpus"]] == list(GPUS) and len(GPUS) >= 30
    assert [m["name"] for m in data["models"]] == list_models() and len(data["models"]) >= 30
    assert all(len(row["source"]) > 10 for row in data["gpus"] + data["models"])
    h100 = next(g for g in data["gpus"] if g["name"] == "h100-sxm")
    assert "h100" in h100["aliases"] and h100["bf16_tflops"] == GPUS["h100-sxm"].bf16_tflops


def test_presets_text_and_one_kind(capsys):
    assert main(["presets", "gpus"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"GPU presets ({len(GPUS)};") and "model presets" not in out
    assert all(f"\n{slug} " in out for slug in GPUS)
    assert main(["presets", "models"]) == 0
    out = capsys.readouterr().out
    assert "GPU presets" not in out and all(f"\n{name} " in out for name in list_models())


def test_an_unknown_gpu_points_at_the_list(capsys):
    assert main(["estimate", "--model", "qwen2.5-7b", "--gpu", "h1000x", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown GPU 'h1000x'" in err and "see polytrace presets" in err
