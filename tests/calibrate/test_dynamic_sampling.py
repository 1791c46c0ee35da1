"""DAPO's dynamic sampling in a verl log (``polytrace/calibrate/dynamic_sampling.py``): a step
generates ``train/num_gen_batches`` batches of ``data.gen_batch_size`` prompts and trains on
``data.train_batch_size`` of them; its ``timing_s/gen`` adds up every batch (verl's DAPO trainer,
``recipe/dapo/dapo_ray_trainer.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _verl_logs import priced_probe

from polytrace.calibrate.validate import prepare, validate
from polytrace.errors import PolytraceError

BASE = ("+ python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=4 data.max_prompt_length=512 "
        "data.max_response_length=1024 trainer.n_gpus_per_node=4 trainer.nnodes=1 "
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct "
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.model.use_remove_padding=True")
DAPO = BASE + " data.train_batch_size=64 data.gen_batch_size=192\n"
STATS = ("response_length/mean:300 - response_length/max:1024 - response_length/min:5 - "
         "response_length/clip_ratio:0.02 - prompt_length/mean:100 - prompt_length/max:300")


def _total(row, stage):
    return sum(row.x[stage].values())


def test_each_generation_batch_is_a_rollout_of_the_generation_batch(tmp_path):
    """Generation is priced as a run of 192 prompts would price it, once per logged batch; the
    trainer's stages as the 64 prompts kept; the rule-based reward over every generated response."""
    stats = [STATS, STATS + " - train/num_gen_batches:1", STATS + " - train/num_gen_batches:3"]
    run, rows, _ = priced_probe(tmp_path / "dapo.log", DAPO, stats)
    _, gen192, _ = priced_probe(tmp_path / "g192.log", BASE + " data.train_batch_size=192\n", [STATS])
    _, train64, _ = priced_probe(tmp_path / "t64.log", BASE + " data.train_batch_size=64\n", [STATS])
    assert (run.prompts_per_step, run.gen_batch_prompts) == (64, 192)
    one, logged_one, three = rows
    for row in (one, logged_one):
        assert row.x["gen"] == pytest.approx(gen192[0].x["gen"], rel=1e-12)
        assert row.other_s == pytest.approx(gen192[0].other_s, rel=1e-12)
    assert _total(three, "gen") == pytest.approx(3 * _total(one, "gen"), rel=1e-12)
    assert three.bound["gen"] == pytest.approx({k: 3 * v for k, v in one.bound["gen"].items()}, rel=1e-12)
    assert three.other_s == pytest.approx(3 * one.other_s, rel=1e-12)
    for stage in ("old_log_prob", "update_actor"):
        assert three.x[stage] == pytest.approx(train64[0].x[stage], rel=1e-12), stage
    # 3x the prompts per batch cost more than the 64 trained on, and less than 3x (one engine pass)
    assert _total(train64[0], "gen") < _total(one, "gen") < 3 * _total(train64[0], "gen")


def test_the_batch_count_alone_repeats_the_rollout(tmp_path):
    """No ``gen_batch_size``: each generation batch is the training batch, run as many times."""
    run, rows, _ = priced_probe(tmp_path / "n.log", BASE + " data.train_batch_size=64\n",
                                [STATS, STATS + " - train/num_gen_batches:2"])
    assert run.gen_batch_prompts is None
    assert _total(rows[1], "gen") == pytest.approx(2 * _total(rows[0], "gen"), rel=1e-12)
    assert rows[1].x["update_actor"] == rows[0].x["update_actor"]


def _dapo_log(path, batches, *, gen_scale=None):
    """A DAPO log whose stage times follow the model's prices at fixed slowdowns (generation 2.0x,
    the trainer 1.4x) with 1% noise; ``gen_scale`` (per step) overrides how many batches the
    generation time really holds."""
    rng = np.random.default_rng(3)
    stats = [f"{STATS.replace('mean:300', f'mean:{250 + 10 * i}')} - train/num_gen_batches:{b}"
             for i, b in enumerate(batches)]
    _, rows, _ = priced_probe(path.parent / f"probe-{path.name}", DAPO, stats)
    lines = [DAPO]
    for i, (row, s) in enumerate(zip(rows, stats), 1):
        k = 1.0 if gen_scale is None else gen_scale[i - 1] / batches[i - 1]
        gen = 2.0 * _total(row, "gen") * k * (1 + 0.01 * rng.standard_normal())
        olp, upd = (1.4 * _total(row, st) * (1 + 0.01 * rng.standard_normal()) for st in ("old_log_prob",
                                                                                          "update_actor"))
        total = gen + olp + upd + row.other_s
        lines.append(f"(TaskRunner pid=1) step:{i} - timing_s/gen:{gen:.3f} - timing_s/old_log_prob:{olp:.3f} - "
                     f"timing_s/update_actor:{upd:.3f} - timing_s/step:{total:.3f} - {s}\n")
    path.write_text("".join(lines))
    return path


def test_a_dapo_log_validates_on_its_generation_batches(tmp_path):
    """Steps of 1-3 generation batches: calibrated on ten, the rest are predicted within 3%. A
    pricing that ignored the count (every step one batch) would miss the 2- and 3-batch steps by
    a third and more."""
    batches = [1, 2, 3, 1, 2, 1, 3, 2, 1, 1, 2, 3, 1, 2, 3, 1, 1, 2, 3, 2, 1, 3]
    res = validate(str(_dapo_log(tmp_path / "dapo.log", batches)))
    assert res.accuracy["gen"]["accuracy"] >= 97.0, res.accuracy["gen"]
    assert res.accuracy["step"]["accuracy"] >= 97.0, res.accuracy["step"]
    assert any(n.startswith("dynamic sampling (DAPO): generation runs 192 prompts x 4 per batch") and "1-3 per step"
               in n and "the trainer the 64 prompts kept" in n for n in res.notes), res.notes
    # the same log with generation times of one batch each: the count is what the pricing follows
    flat = validate(str(_dapo_log(tmp_path / "flat.log", batches, gen_scale=[1] * len(batches))))
    assert flat.accuracy["gen"]["accuracy"] < 80.0, flat.accuracy["gen"]


@pytest.mark.parametrize("value, shown", [("0", "0"), ("nan", "nan"), ("2.5", "2.5"), ("5000", "5000")])
def test_a_bad_batch_count_leaves_its_step_out_saying_why(tmp_path, value, shown):
    batches = [1, 2, 3, 1, 2, 1, 3, 2, 1, 1, 2, 3, 1, 2]
    path = _dapo_log(tmp_path / "dapo.log", batches)
    text = path.read_text().splitlines(keepends=True)
    text[12] = text[12].replace("train/num_gen_batches:", f"train/num_gen_batches:{value} - x:", 1)
    path.write_text("".join(text))
    _log, _run, notes, rows, _split = prepare(str(path))
    assert 12 not in [r.step for r in rows]
    assert any("left out" in n and "train/num_gen_batches is" in n and shown in n for n in notes), notes
    assert all(math.isfinite(r.other_s) for r in rows)


@pytest.mark.parametrize("gen, message", [
    ("32", r"bad.log: data.gen_batch_size 32 is below data.train_batch_size 64: verl's dynamic sampling generates at "
           r"least the prompts it trains on$"),
    ("300000", r"bad.log: data.gen_batch_size 300000 x 4 responses = 1,200,000 sequences per generation batch, more "
               r"than 1,048,576; pass --set data.gen_batch_size=N$"),
    ("many", r"bad.log: data.gen_batch_size in .* is 'many': expected a whole number"),
])
def test_a_generation_batch_that_cannot_be_is_one_line(tmp_path, gen, message):
    path = tmp_path / "bad.log"
    path.write_text(BASE + f" data.train_batch_size=64 data.gen_batch_size={gen}\n"
                    "(TaskRunner pid=1) step:1 - timing_s/gen:10 - timing_s/old_log_prob:1 - "
                    f"timing_s/update_actor:2 - timing_s/step:14 - {STATS}\n")
    with pytest.raises(PolytraceError, match=message):
        prepare(str(path))
