"""``validate`` on long logs: the work it does per step is bounded, with the same numbers.

No wall-clock assertion (benchmarks are not timed tests): the tests count the work that made a
1,000-step log take ~35 s (scipy's inverse incomplete beta over every sequence of every step, and
the trainer priced rank by rank) and check that the fast paths give what the slow ones gave."""

from __future__ import annotations

import numpy as np
import pytest
from _verl_logs import Run, write_log
from scipy import special

import polytrace.stepmodel.quantiles as quantiles
import polytrace.stepmodel.stages as stages
from polytrace.calibrate.logconfig import Overrides
from polytrace.calibrate.validate import prepare, validate
from polytrace.stepmodel.pricing import Pricer


@pytest.mark.parametrize("n", [512, 777, 5120, 20000])
def test_interpolated_quantiles_within_their_stated_bound(n):
    q = (np.arange(n) + 0.5) / n
    for b in np.exp(np.linspace(np.log(0.002), np.log(1500.0), 25)):
        got, err = quantiles.midpoint_quantiles(n, 1.5, float(b))
        exact = special.betaincinv(1.5, float(b), q)
        rel = float(np.max(np.abs(got - exact) / exact))
        assert rel <= max(err, 1e-15), (n, b, rel, err)
        assert err in (0.0, quantiles.REL_ERROR)  # 0: scipy's own (b small: the knots reach 1)
        polished, perr = quantiles.midpoint_quantiles(n, 1.5, float(b), polish=True)
        assert float(np.max(np.abs(polished - exact) / exact)) <= max(perr, 1e-15)


def _scipy_lengths(monkeypatch, args):
    monkeypatch.setattr(stages, "midpoint_quantiles",
                        lambda n, a, b, polish=False: (special.betaincinv(a, b, (np.arange(n) + 0.5) / n), 0.0))
    try:
        return stages.synthetic_lengths(*args)
    finally:
        monkeypatch.undo()


def _cases(count, seed):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.choice([40, 600, 1024, 5120]))
        cap = int(rng.choice([256, 1024, 4096, 32768]))
        mx = float(cap) if rng.random() < 0.3 else float(rng.uniform(0.2, 1.0) * cap)
        mean = float(rng.uniform(0.01, 0.99) * mx)
        yield (n, mean, mx, float(rng.uniform(0, 0.5) * mean), float(rng.choice([0.0, 0.01, 0.2])), cap)


def test_synthetic_lengths_are_the_ones_scipy_quantiles_give(monkeypatch):
    """Whole-number lengths identical to those from scipy's quantiles (the slow path, kept as the
    reference)."""
    for args in _cases(150, 3):
        assert np.array_equal(stages.synthetic_lengths(*args), _scipy_lengths(monkeypatch, args)), args


def test_lengths_near_a_rounding_boundary_are_computed_again(monkeypatch):
    """Quantiles off by up to their stated bound (here: adversarially, 0.9x the bound) still give
    scipy's whole numbers, because a length that close to .5 is computed again polished. Without
    that recheck ~1 length in 1,000 rounds the other way."""
    def off_by_the_bound(n, a, b, polish=False):
        exact = special.betaincinv(a, b, (np.arange(n) + 0.5) / n)
        if polish:
            return exact, 1e-12
        signs = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
        return exact * (1.0 + 0.9 * quantiles.REL_ERROR * signs), quantiles.REL_ERROR

    for args in _cases(150, 4):
        expect = _scipy_lengths(monkeypatch, args)
        monkeypatch.setattr(stages, "midpoint_quantiles", off_by_the_bound)
        got = stages.synthetic_lengths(*args)
        monkeypatch.undo()
        assert np.array_equal(got, expect), args


LONG = dict(steps=60, prompts=1024, n=5, max_response=1024, rollout_tp=2, resp_growth=0.3, test_freq=10,
            save_freq=50)


STATED = {"actor_rollout_ref.rollout.enforce_eager": True,
          "actor_rollout_ref.model.enable_gradient_checkpointing": False,
          "actor_rollout_ref.actor.fsdp_config.param_offload": False,
          "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False}


def test_long_log_work_per_step_is_bounded(tmp_path, monkeypatch):
    """Per step of a 1024 x 5 log: scipy's inverse incomplete beta on the knots only (under a
    tenth of the 6,144 sequences and prompts it used to run over), and the trainer's kernel
    families priced once per pass (the update's 16 optimizer steps x 8 ranks used to cost 128
    pricings each)."""
    path = write_log(tmp_path / "long.log", Run(**LONG))
    evaluated = []
    real_inverse = special.betaincinv

    def counting_inverse(a, b, q):
        evaluated.append(np.size(q))
        return real_inverse(a, b, q)

    monkeypatch.setattr(special, "betaincinv", counting_inverse)
    gemm_calls = []
    real_gemm = Pricer.gemm

    def counting_gemm(self, *args, **kwargs):
        gemm_calls.append(1)
        return real_gemm(self, *args, **kwargs)

    monkeypatch.setattr(Pricer, "gemm", counting_gemm)
    # every setting stated: no hypothesis priced on the window (``infer``; its work is bounded by
    # the window and the hypotheses, not by the log's length: ``test_settings``)
    _, run, _, rows, _ = prepare(path, Overrides(gpu="mi300x", settings=STATED))
    per_step_points = run.prompts_per_step * (run.n + 1)
    assert len(rows) == 60
    assert sum(evaluated) < 0.1 * per_step_points * len(rows), (sum(evaluated), per_step_points)
    passes = 3  # old_log_prob, ref, update_actor
    assert len(gemm_calls) == passes * len(rows)


def test_long_log_validates_with_the_figures_of_the_slow_path(tmp_path, monkeypatch):
    """The same accuracy figures with the fast quantiles as with scipy's (a 40-step log)."""
    path = write_log(tmp_path / "log.log", Run(steps=40, prompts=512, n=4, max_response=1024))
    fast = validate(path, overrides=Overrides(gpu="mi300x")).accuracy
    monkeypatch.setattr(stages, "midpoint_quantiles",
                        lambda n, a, b, polish=False: (special.betaincinv(a, b, (np.arange(n) + 0.5) / n), 0.0))
    slow = validate(path, overrides=Overrides(gpu="mi300x")).accuracy
    for k in fast:
        assert fast[k]["accuracy"] == pytest.approx(slow[k]["accuracy"], abs=1e-9), k
