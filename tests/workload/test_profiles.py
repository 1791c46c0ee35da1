"""Profiles: sampling contract, determinism, group structure, drift, fitting, persistence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polytrace.errors import PolytraceError
from polytrace.workload.profiles import BUILTIN, DriftCurve, Profile, fit_profile, get_drift, get_profile, list_profiles
from polytrace.workload.profiles.quantiles import QuantileTable


@pytest.mark.parametrize("name", BUILTIN)
def test_sample_contract(name):
    p = get_profile(name)
    b = p.sample(step=0, seed=0)
    c = p.config
    assert len(b) == c.prompts_per_step * c.n
    for arr in (b.prompt_lens, b.response_lens, b.group_ids):
        assert arr.dtype == np.int64 and arr.shape == (len(b),)
    assert b.capped.dtype == bool
    assert (b.response_lens >= 1).all() and (b.response_lens <= c.max_response_len).all()
    assert (b.prompt_lens >= 1).all() and (b.prompt_lens <= c.max_prompt_len).all()
    assert np.array_equal(b.capped, b.response_lens >= c.max_response_len)
    assert np.array_equal(np.bincount(b.group_ids), np.full(c.prompts_per_step, c.n))
    # a prompt's n responses share its prompt
    assert all(len(set(b.prompt_lens[b.group_ids == g])) == 1 for g in range(3))
    if p.kind == "multiturn":
        t = b.turns
        assert t is not None
        per_seq = np.bincount(t.seq, weights=t.completion_tokens + t.tool_tokens, minlength=len(b))
        assert np.array_equal(per_seq.astype(np.int64), b.response_lens)
        assert (t.completion_tokens >= 0).all() and (t.tool_tokens >= 0).all()
        assert (t.cached_tokens <= t.prompt_tokens).all()
        assert (b.loss_lens <= b.response_lens).all()
    assert b.meta == {"profile": name, "seed": 0, "step": 0, "drift_scale": 1.0}


@pytest.mark.parametrize("name", BUILTIN)
def test_same_seed_same_batch_other_seed_other_batch(name):
    p = get_profile(name)
    a, b, c = p.sample(3, 7), p.sample(3, 7), p.sample(3, 8)
    assert np.array_equal(a.response_lens, b.response_lens) and np.array_equal(a.prompt_lens, b.prompt_lens)
    assert not np.array_equal(a.response_lens, c.response_lens)
    assert not np.array_equal(a.response_lens, p.sample(4, 7).response_lens)


def test_golden_batch_is_stable_across_machines():
    """A pinned digest of one sampled batch: a change in the sampler (or a platform difference)
    that changes batches shows up here. Regenerate deliberately if the model changes."""
    b = get_profile("dapo-math-32b").sample(step=0, seed=0, prompts=4)
    assert b.response_lens.tolist()[:8] == GOLDEN_DAPO_FIRST8
    assert int(b.response_lens.sum()) == GOLDEN_DAPO_SUM


# Pinned 2026-11-29 from the built-in dapo-math-32b profile (polytrace 0.1.0).
GOLDEN_DAPO_FIRST8 = [324, 289, 751, 314, 157, 785, 1232, 582]
GOLDEN_DAPO_SUM = 18338


def test_prompts_override_and_zero():
    p = get_profile("deepcoder-14b")
    assert len(p.sample(prompts=5)) == 5 * p.config.n
    assert len(p.sample(prompts=0)) == 0


@pytest.mark.parametrize("bad", [dict(step=-1), dict(seed=-2), dict(prompts=-1), dict(step=1.5)])
def test_bad_sample_arguments(bad):
    with pytest.raises(PolytraceError):
        get_profile("dapo-math-32b").sample(**bad)


def test_unknown_profile_lists_valid_names():
    with pytest.raises(PolytraceError, match="unknown profile 'nope'; valid profiles: dapo-math-32b"):
        get_profile("nope")
    assert list_profiles() == list(BUILTIN)


def test_group_correlation_follows_rho():
    """The within-group spread must come from the copula: rho=0 makes group means vary no more
    than chance, a high rho makes responses of a prompt alike."""
    base = get_profile("dapo-math-32b")

    def between_share(rho):
        params = dict(base.params, rho=rho)
        p = Profile(base.name, "", "single", "copula", base.config, params)
        b = p.sample(seed=1, prompts=2000)
        logs = np.log(b.response_lens).reshape(2000, -1)
        return logs.mean(axis=1).var() / logs.var()

    low, high = between_share(0.0), between_share(0.8)
    assert low < 0.2 < 0.6 < high


def test_cap_mass_reproduced():
    p = get_profile("deepcoder-14b")
    b = p.sample(seed=0, prompts=20000)
    assert b.capped.mean() == pytest.approx(p.fit_stats["p_cap"], abs=0.02)


def test_drift_scales_lengths():
    p = get_profile("dapo-math-32b")
    curve = DriftCurve((0.0, 100.0), (1.0, 3.0))
    d = p.with_drift(curve)
    # same step and seed: the same draws, scaled (the cap is far above these lengths)
    assert np.array_equal(d.sample(step=0, seed=0).response_lens, p.sample(step=0, seed=0).response_lens)
    late = d.sample(step=100, seed=0, prompts=500).response_lens
    plain = p.sample(step=100, seed=0, prompts=500).response_lens
    assert np.abs(late - 3 * plain).max() <= 2
    assert d.sample(step=50, seed=0, prompts=500).response_lens.mean() / plain.mean() == pytest.approx(2.0, rel=0.1)
    assert d.sample(step=100).meta["drift_scale"] == 3.0


def test_drift_preset_from_real_log():
    curve = get_drift("qwen2-7b-gpg")
    assert "response_length/mean" in curve.source
    assert 0.8 < curve.at(0) < 1.2 and curve.at(300) > 2.0  # the log's mean grows about threefold
    assert get_drift("none") is None
    with pytest.raises(PolytraceError, match="valid drift presets"):
        get_drift("bogus")


def test_quantile_table_keeps_the_cap_atom():
    rng = np.random.default_rng(0)
    vals = np.minimum(rng.lognormal(7, 1, 5000), 4000)
    t = QuantileTable.fit(vals, cap=4000)
    z = rng.standard_normal(200000)
    s = t.sample(z)
    assert np.mean(s >= 4000) == pytest.approx(np.mean(vals >= 4000), abs=0.005)
    assert t.quantile(0.5) == pytest.approx(np.median(vals), rel=0.02)


def test_fit_roundtrip_and_load(tmp_path):
    from polytrace.workload.trace.model import PromptGroup, Response, Step, Trace

    rng = np.random.default_rng(3)
    steps = []
    for s in range(3):
        groups = []
        for _ in range(40):
            scale = rng.lognormal(6, 0.8)
            lens = np.minimum(np.maximum(1, rng.lognormal(np.log(scale), 0.3, 4)).astype(int), 2048)
            groups.append(PromptGroup(int(rng.integers(50, 400)), [Response(int(v), v >= 2048) for v in lens]))
        steps.append(Step(s, groups))
    trace = Trace(steps, max_response_len=2048, name="toy")
    p = fit_profile(trace, name="toy")
    assert p.config.prompts_per_step == 40 and p.config.n == 4 and p.config.max_response_len == 2048
    assert 0.6 < p.params["rho"] < 0.95  # strongly grouped by construction
    path = tmp_path / "toy.json"
    path.write_text(p.dumps())
    again = get_profile(str(path))
    assert np.array_equal(again.sample(1, 2).response_lens, p.sample(1, 2).response_lens)


def test_bad_profile_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PolytraceError, match=r"bad.json:1: invalid JSON"):
        get_profile(str(bad))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(PolytraceError, match="not a polytrace profile"):
        get_profile(str(other))
    broken = json.loads(get_profile("dapo-math-32b").dumps())
    broken["params"]["rho"] = 1.5
    f = tmp_path / "broken.json"
    f.write_text(json.dumps(broken))
    with pytest.raises(PolytraceError, match="rho"):
        get_profile(str(f))


# --------------------------------------------------------------------------- fit: cap, round trip (issues 15, 17)


def _toy_trace(lens_per_group, steps=2, prompt=100):
    from polytrace.workload.trace.model import PromptGroup, Response, Step, Trace

    return Trace([Step(s, [PromptGroup(prompt, [Response(int(v), False) for v in lens]) for lens in lens_per_group])
                  for s in range(steps)], max_response_len=int(max(max(g) for g in lens_per_group)), name="toy",
                 cap_source="longest")


def test_fit_of_identical_lengths_has_no_nan_rho(tmp_path):
    """Before: 0/0 in the intra-class correlation gave "rho": NaN, which describe then refused."""
    trace = _toy_trace([[100, 100, 100, 100]] * 6)
    p = fit_profile(trace)
    assert p.params["rho"] == 0.0 and p.params["prompt_corr"] == 0.0
    assert Profile.loads(p.dumps()).params == p.params


def test_fit_file_refuses_to_write_what_does_not_read_back(tmp_path, monkeypatch):
    from polytrace.workload.profiles import fit as fit_module

    trace_file = tmp_path / "packed_lengths_step_0.jsonl"
    trace_file.write_text("".join(json.dumps({"step": 0, "input": 10 + g, "output": [5 + g, 9 * g + 1]}) + "\n"
                                  for g in range(8)))
    out = tmp_path / "p.json"
    out.write_text("precious")
    real_fit = fit_module.fit_profile

    def nan_fit(*args, **kwargs):
        p = real_fit(*args, **kwargs)
        p.params["prompt_corr"] = float("nan")
        return p

    monkeypatch.setattr(fit_module, "fit_profile", nan_fit)
    with pytest.raises(PolytraceError, match=r"p.json: not written: the fitted profile does not read back .*NaN"):
        fit_module.fit_file(trace_file, out)
    assert out.read_text() == "precious"
    monkeypatch.setattr(fit_module, "fit_profile", real_fit)
    result = fit_module.fit_file(trace_file, out)
    assert get_profile(str(out)).params == result.profile.params


def test_fit_says_where_the_cap_came_from(polytrace_data, tmp_path):
    """Before: the DAPO trace's observed maximum (10,112) silently became the cap (the run's: 32,768)."""
    from polytrace.workload.profiles import StatedBatch, fit_file

    dapo = polytrace_data / "verl/profile/packed_length_log/20260610_092349"
    guessed = fit_file(dapo, tmp_path / "a.json")
    assert guessed.profile.config.max_response_len == 10112 and guessed.profile.fit_stats["cap_source"] == "longest"
    assert "max response 10,112 (the longest response: no pile-up" in guessed.summary()
    assert "--max-response-len" in guessed.summary()
    stated = fit_file(dapo, tmp_path / "b.json", batch=StatedBatch(max_response_len=32768))
    assert stated.profile.config.max_response_len == 32768 and stated.profile.fit_stats["cap_source"] == "stated"
    assert "max response 32,768 (stated by the caller" in stated.summary()
    coder = fit_file(polytrace_data / "rllm/profile/packed_length_log", tmp_path / "c.json")
    assert coder.profile.fit_stats["cap_source"] == "pile-up" and coder.profile.config.max_response_len == 16000
    assert "inferred from responses piling up at the maximum" in coder.summary()
    with pytest.raises(PolytraceError, match="exceeds the stated max_response_len=8000"):
        fit_file(dapo, tmp_path / "d.json", batch=StatedBatch(max_response_len=8000))


@pytest.mark.parametrize("edit,match", [
    (lambda d: d["params"]["response"]["v"].__setitem__(3, float("nan")), "NaN is not a valid value"),
    (lambda d: d["params"]["response"]["v"].__setitem__(-1, 1e300), "finite, with values in"),
    (lambda d: d["config"].__setitem__("prompts_per_step", 10 ** 12), "above the limit"),
    (lambda d: d["config"].__setitem__("n", 100_000), "sequences per step"),
    (lambda d: d.__setitem__("kind", 0), "kind must be 'single' or 'multiturn'"),
    (lambda d: d.__setitem__("drift", {"steps": [0, 1], "scale": [1, 1e400]}), "Infinity is not a valid value"),
    (lambda d: d.__setitem__("drift", {"steps": [0, 1], "scale": [1, "nan"]}), "must be finite"),
    (lambda d: d["params"].__setitem__("response", [1, 2]), "malformed profile"),
])
def test_hostile_profile_files_are_refused(tmp_path, edit, match):
    d = json.loads(get_profile("dapo-math-32b").dumps())
    edit(d)
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    with pytest.raises(PolytraceError, match=match):
        get_profile(str(f))


@pytest.mark.parametrize("name", ["search-r1-7b", "model-b-math", "model-b-tooluse"])
def test_hostile_tables_of_every_model_are_refused(tmp_path, name):
    d = json.loads(get_profile(name).dumps())
    p = d["params"]
    if name == "search-r1-7b":
        p["multiturn"]["turns_pmf_by_decile"] = p["multiturn"]["turns_pmf_by_decile"][:3]  # rows != deciles
    elif name == "model-b-math":
        p["means"][0][1] = 1e300  # a mean no length can have
    else:
        keys = list(p["call_counts"])
        p["call_counts"][keys[0]] = -1.0  # a negative probability
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    with pytest.raises(PolytraceError, match="malformed profile"):  # before: an IndexError, or accepted
        get_profile(str(f))


@pytest.mark.parametrize("name,edit,match", [
    ("model-b-math", lambda p: p["means"][0].__setitem__(1, 3e9), "gmm means and covariances must be finite"),
    ("model-b-math", lambda p: p["covariances"][0][0].__setitem__(0, 1e400), "gmm means and covariances"),
    ("model-b-tooluse", lambda p: next(iter(p["per_count"].values()))["means"][0].__setitem__(0, -3e9),
     r"tool-use means and covariances for \d+ calls must be finite and below 2.14748e\+09 tokens"),
    ("model-b-tooluse", lambda p: next(iter(p["per_count"].values()))["covariances"][0][0].__setitem__(0, 1e400),
     r"tool-use means and covariances for \d+ calls must be finite"),
])
def test_mixture_moments_are_bounded_in_both_models(tmp_path, name, edit, match):
    """Means beyond 2**31 tokens and infinite covariances (1e400 reads as inf) are refused by the
    Gaussian-mixture model and by every per-call-count model of the tool-use one."""
    d = json.loads(get_profile(name).dumps())
    edit(d["params"])
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d).replace("Infinity", "1e400"))
    with pytest.raises(PolytraceError, match=match):
        get_profile(str(f))


@pytest.mark.parametrize("variance", [0, False, -4.0])
def test_gmm_zero_input_variance_is_refused_without_a_numpy_warning(tmp_path, variance):
    """A zero (or JSON false, or negative) input variance in a Gaussian-mixture component is refused
    before the conditional variance divides by it: fuzzing (seed 7) found numpy's divide-by-zero
    warning printed ahead of the one-line error."""
    import warnings

    d = json.loads(get_profile("model-b-math").dumps())
    d["params"]["covariances"][1][0][0] = variance
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PolytraceError, match="gmm covariances must be positive definite"):
            get_profile(str(f))


def test_deeply_nested_and_fifo_profiles(tmp_path):
    import os

    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "polytrace.profile", "params": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(PolytraceError, match="nested too deeply"):
        get_profile(str(deep))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(PolytraceError, match="fifo.json: no such profile file"):
        get_profile(str(fifo))


def test_sampling_is_refused_before_allocating_past_the_step_limit():
    """fidelity samples as many prompts as the trace's step has groups: a profile with a huge n
    must be refused, not allocate prompts x n sequences."""
    from dataclasses import replace

    from polytrace.workload.profiles.profile import MAX_SEQUENCES_PER_STEP, BatchConfig

    p = get_profile("dapo-math-32b")
    big = replace(p, config=BatchConfig(1, MAX_SEQUENCES_PER_STEP, 2048, 32768))
    with pytest.raises(PolytraceError, match="above the limit of 4,194,304 sequences per step"):
        big.sample(step=0, seed=0, prompts=1000)
