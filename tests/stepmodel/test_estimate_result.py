"""``estimate --json`` is ``EstimateResult.to_json()``: versioned (docs/json-schema.md), every
family's price an enum value said by its parts, not parsed from the source text (issue 35 step 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polytrace.cli import main
from polytrace.stepmodel import estimate
from polytrace.stepmodel.result import SCHEMA_VERSION, EstimateResult, Price, combined, price_of

SMALL = ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--prompts", "16"]


def test_the_json_is_the_result_type_versioned(capsys):
    assert main(SMALL + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    again = EstimateResult.from_json(doc)
    assert again.to_json() == doc and again.mode == "sync" and again.framework == "verl" and again.extra == {}
    for fam in doc["summary"]["families"].values():
        Price(fam["status"])  # every status is a Price value
    assert main(SMALL + ["--compare-modes", "--gpus", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema_version"] == SCHEMA_VERSION


def test_the_schema_doc_names_every_top_level_key(capsys):
    assert main(SMALL + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    text = (Path(__file__).resolve().parents[2] / "docs" / "json-schema.md").read_text(encoding="utf-8")
    assert f"version {SCHEMA_VERSION}" in text
    assert [k for k in doc if f"`{k}`" not in text] == []
    assert [p.value for p in Price if f"`{p.value}`" not in text] == []


def test_a_model_host_price_is_roofline_by_its_part_whatever_its_text():
    res = estimate("dapo-math-32b", "qwen3-30b-a3b", "h100", 16, steps=[0], results_root="/nonexistent",
                   rollout_tp=2, strategy="megatron", train_pp=2, train_ep=8, n=8, prompts=8)
    gen_comm = res.rows[0]["kernel_prices"]["gen"]["comm"]
    assert gen_comm == ["roofline"]
    assert "host (refit" in res.rows[0]["kernel_sources"]["gen"]["comm"]
    assert res.summary["families"]["comm"]["status"] == "roofline"


@pytest.mark.parametrize("prices,sources,want", [
    (["roofline"], [], Price.ROOFLINE),
    (["roofline", "measured"], [], Price.PARTLY_MEASURED),
    (["measured"], ["results/h100/a.json (ours)"], Price.MEASURED),
    (["measured"], ["results/h100/a.json (ours) (extrapolated x40)"], Price.EXTRAPOLATED),
])
def test_a_familys_price_from_its_parts(prices, sources, want):
    assert combined(prices, sources) is want


def test_a_source_text_alone_is_roofline_only_by_name():
    assert price_of("roofline") is Price.ROOFLINE and price_of("roofline (refit)") is Price.ROOFLINE
    assert price_of("host (refit: 3 expert tensors)") is Price.MEASURED  # no prefix guessing: its Part says
