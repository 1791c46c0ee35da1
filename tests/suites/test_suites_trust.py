"""What makes the first GPU run's numbers trustworthy, on CPU (interpreter, fake device):

- every output is checked at every shape: past the full-truth size, a deterministic sample whose
  truth is exact (vocabulary rows of the LM head's d(weight) over every token; whole sequences'
  dK/dV), so an output wrong only inside the sample fails;
- each provider has its own truth and bound: torch is never compared with itself, a planted 3e-3
  scale error in a torch GEMM fails (bias check), a peer's fp32 output that only meets a 16-bit bound
  is reported as such, never passed;
- the output of the last timed launch is checked again, on the input copy it ran on (a provider
  that caches its first result fails);
- a median below the roofline floor fails the case; its prediction and a 2x flag are recorded;
- thermals: the measuring window, the cooldown between providers, SM clock samples per round
  and the throttled mark."""

from __future__ import annotations

import json

import pytest
import torch
from test_suites_timing import FakeBenchmark, FakeDevice

from polytrace.run.hardware import get_gpu
from suites import checks, environment, harness, predict, registry, timing
from suites.harness import Case, Provider

# ----------------------------------------------------------------------- sampled exact truths


def test_sampled_vocabulary_rows_of_d_weight_equal_the_whole_gradients_rows():
    from suites.logprob_ref import dweight_rows

    gen = torch.Generator().manual_seed(3)
    h = torch.randn(70, 12, generator=gen, dtype=torch.float64)
    w = torch.randn(300, 12, generator=gen, dtype=torch.float64) * 0.3
    tok = torch.randint(0, 300, (70,), generator=gen)
    vrows = checks.subset_rows(300)
    for entropy in (False, True):
        ww = w.clone().requires_grad_(True)
        logp = torch.log_softmax(h @ ww.t(), -1)
        loss = logp.gather(1, tok[:, None]).sum()
        if entropy:
            loss = loss - (logp.exp() * logp).sum()
        (whole,) = torch.autograd.grad(loss, ww)
        assert torch.allclose(dweight_rows(h, w, tok, vrows, entropy, torch.float64), whole[vrows], rtol=0,
                              atol=1e-12)
    assert len(vrows) == 64 and vrows[0] == 0 and vrows[-1] == 299


def _linear_case(tokens: int, vocab: int):
    from suites import logprob_cases as lc

    s = lc.TokShape("t", "", tokens, 1.0, "tiny", vocab, 16)
    mode = "fwd+bwd"
    meta = Case("logprob", "linear_token_logprobs", "ours", mode, {"T": tokens, "V": vocab}, provider_kind="ours",
                extra={"check_coverage": lc._linear_coverage(s, "ours", mode)})
    return s, registry.BenchCase("logprob", meta, lc.LINEAR_PROVIDERS[0], lc._linear_inputs(s, True, False),
                                 lc._bind_linear("ours", s, mode), lc._linear_truth(s, "ours", mode),
                                 lc._linear_compare(s, "ours", mode))


def _planted(case, output: int, rows, factor: float):
    def bind(inputs, kernels):
        bound = case.bind(inputs, kernels)
        fn = bound.fn

        def wrong():
            outs = list(fn())
            outs[output] = outs[output].clone()
            outs[output][rows] *= factor
            return tuple(outs)
        bound.fn = wrong
        return bound
    return registry.BenchCase(case.suite, case.meta, case.provider, case.make_inputs, bind, case.truth, case.compare)


def test_the_fused_lm_heads_d_weight_is_checked_past_64_tokens_on_sampled_vocabulary_rows():
    """At 66 tokens (every GPU shape is past 64) d(weight) was not checked; now 64 of its 150
    vocabulary rows are, each exact over every token: a 2% error in one sampled row fails, one in
    a row outside the sample is the sample's stated blind spot (coverage 64/150)."""
    s, case = _linear_case(66, 150)
    prepared = registry.prepare(case)
    cov = prepared.check["coverage"]["d(weight)"]
    assert prepared.check["ok"] is True and (cov["checked"], cov["of"], cov["unit"]) == (64, 150, "vocabulary rows")
    vrows = checks.subset_rows(150)
    with pytest.raises(registry.OutputCheckFailed, match=r"d\(weight\): max"):
        registry.prepare(_planted(case, 1, int(vrows[17]), 1.02))
    outside = next(i for i in range(150) if i not in set(vrows.tolist()))
    assert registry.prepare(_planted(case, 1, outside, 1.02)).check["ok"] is True


def _attention(lens, monkeypatch):
    from suites import attention_cases as ac

    monkeypatch.setattr(ac, "FULL_CHECK_TOKENS", 16)
    s = ac.VarlenShape("t", "", "tiny", list(lens), 1.0, 2, 1, 16)
    return ac, s


def _reference_bind(s, corrupt_rows=None):
    """A provider computing the reference in fp32 (a correct output), optionally 2% off on some
    packed rows of dk."""
    from polytrace_kernels.attention.reference import varlen_attention_reference

    def bind(inp, kernels):
        leaves = [t.detach().float().requires_grad_(True) for t in (inp.q, inp.k, inp.v)]
        out = varlen_attention_reference(*leaves, inp.cu, inp.cu, causal=True, compute_dtype=torch.float32)

        def fn():
            dq, dk, dv = torch.autograd.grad(out, leaves, inp.dout.float(), retain_graph=True)
            dk = dk.half()
            if corrupt_rows is not None:
                dk[corrupt_rows] *= 1.02
            return dq.half(), dk, dv.half()
        return registry.Bound(fn, graph_ok=False)
    return bind


def test_attention_dk_dv_past_the_full_check_size_are_checked_on_whole_sequences(monkeypatch):
    ac, s = _attention([5, 9, 3, 7, 6], monkeypatch)
    truth = ac._truth(s, "bwd")
    inputs = ac._inputs(s, True)("cpu", 0)
    t = truth(inputs)
    whole = ac.attention_rows(inputs.q, inputs.k, inputs.v, s.seqlens, None, inputs.dout)
    assert torch.allclose(t["want"]["dk"], whole["want"]["dk"][t["kv_index"]], rtol=0, atol=1e-12)
    assert t["kv_index"].tolist() == list(range(14))  # sequences 0 and 1 fit the 16-token sample
    cov = ac._coverage(s, "bwd")
    assert (cov["dk"]["checked"], cov["dk"]["of"], cov["dq"]["checked"]) == (14, 30, 30)

    def case(bind):
        meta = Case("attention", "varlen_attention", "ref", "bwd", {"T": 30}, provider_kind="peer",
                    extra={"check_coverage": cov})
        return registry.BenchCase("attention", meta, Provider("ref"), ac._inputs(s, True), bind, truth,
                                  ac._compare(s, "ref", "bwd"))

    assert registry.prepare(case(_reference_bind(s))).check["verdict"] == "pass"
    with pytest.raises(registry.OutputCheckFailed, match="dk"):  # a token of sampled sequence 1
        registry.prepare(case(_reference_bind(s, corrupt_rows=slice(6, 8))))
    assert registry.prepare(case(_reference_bind(s, corrupt_rows=slice(20, 22)))).check["ok"] is True


def test_a_case_whose_declared_output_is_not_checked_is_refused():
    with pytest.raises(ValueError, match="declared but not checked: d\\(weight\\)"):
        checks.summary([checks.Graded("d(hidden)", 0.0, 1.0, True, "fp32")],
                       coverage={"d(hidden)": checks.cover(4, 4, "rows"), "d(weight)": checks.cover(4, 4, "rows")})
    with pytest.raises(ValueError, match="no output was checked"):
        checks.summary([])


# ------------------------------------------------------------------- no self-comparison


def _gemm_case(mode="fwd"):
    case = next(c for c in registry.suite_cases("gemm") if c.meta.mode == mode)
    return case


def test_the_torch_gemm_is_held_to_one_rounding_of_the_truth_not_to_itself():
    case = _gemm_case()
    prepared = registry.prepare(case)
    rules = [o["rule"] for o in prepared.check["outputs"]]
    assert prepared.check["verdict"] == "pass" and rules[0].startswith("bfloat16 of fp32") and "torch" not in rules[0]
    assert rules[1].startswith("scale bias")

    def scaled(inputs, kernels):
        bound = case.bind(inputs, kernels)
        fn = bound.fn
        bound.fn = lambda: tuple(o * 1.003 for o in fn())  # below bf16's 3.9e-3 rounding
        return bound
    bad = registry.BenchCase(case.suite, case.meta, case.provider, case.make_inputs, scaled, case.truth, case.compare)
    with pytest.raises(registry.OutputCheckFailed, match=r"y bias: .*out is truth x \(1 \+ 0.00(29|30)"):
        registry.prepare(bad)


def _sixteen_bit_logprobs():
    gen = torch.Generator().manual_seed(1)
    z64 = torch.randn(40, 300, generator=gen, dtype=torch.float64) * 3
    tok = torch.randint(0, 300, (40,), generator=gen)
    truth = torch.log_softmax(z64, -1).gather(1, tok[:, None])[:, 0]
    via_bf16 = torch.log_softmax(z64.to(torch.bfloat16).float(), -1).gather(1, tok[:, None])[:, 0]
    return via_bf16, truth, z64.abs().amax(-1)


def test_a_peers_fp32_output_that_meets_only_a_16_bit_bound_is_reported_never_passed():
    out, truth, scale = _sixteen_bit_logprobs()
    (peer,) = checks.verify("logprob", out, truth, ours=False, terms=300, scale=scale, inputs_dtype=torch.bfloat16)
    assert peer.verdict == "16-bit-only" and peer.ok is False and "misses the fp32 rule" in peer.rule
    summary = checks.summary([peer], coverage={"logprob": checks.cover(40, 40, "rows")})
    assert summary["ok"] is False and summary["verdict"] == "16-bit-only"
    (ours,) = checks.verify("logprob", out, truth, ours=True, terms=300, scale=scale, inputs_dtype=torch.bfloat16)
    assert ours.verdict == "fail"  # our kernels have no 16-bit tier
    # an fp32 output within the fp32 rule passes on it, for peers too
    (exact,) = checks.verify("logprob", truth.float(), truth, ours=False, terms=300, scale=scale,
                             inputs_dtype=torch.bfloat16)
    assert exact.verdict == "pass" and exact.rule.startswith("fp32")
    # and a result worse than 16-bit intermediates fails
    (worse,) = checks.verify("logprob", out + 0.4, truth, ours=False, terms=300, scale=scale,
                             inputs_dtype=torch.bfloat16)
    assert worse.verdict == "fail"


# --------------------------------------------------------------------- recheck after timing


def _toy_case(kind: str, dev: FakeDevice):
    first: list = []

    def inputs(device, seed):
        return torch.arange(4096, dtype=torch.float32) + seed  # 16 KiB: graph launches cycle copies

    def bind(x, kernels):
        def fn():
            dev.now += 20e-6
            if kind == "caching":
                if not first:
                    first.append(x * 2)
                return first[0]
            return x * 2
        return registry.Bound(fn)

    def compare(out, want, x):
        from polytrace_kernels.tolerance import check_fp32

        return [check_fp32("y", out, want)]

    p = Provider(f"toy-{kind}", kind="peer")
    meta = Case("packing", "toy", p.name, "fwd", {"n": kind}, bytes_moved=32768.0,
                extra={"check_coverage": {"y": checks.cover(4096, 4096, "elements")}})
    return registry.BenchCase("toy", meta, p, inputs, bind, lambda x: (x * 2).double(), compare)


def test_the_last_timed_launch_is_checked_on_the_input_copy_it_ran_on(monkeypatch):
    dev = FakeDevice()
    monkeypatch.setattr(timing, "_BACKEND", [dev])
    good = registry.measure(_toy_case("honest", dev), rounds=2)
    assert good.plan.mode == "graph" and good.plan.copies > 1
    after = good.check["after_timing"]
    assert after["ok"] is True and after["input_copy"] == (good.plan.launches - 1) % good.plan.copies != 0
    with pytest.raises(registry.OutputCheckFailed, match="last timed launch is wrong"):
        registry.measure(_toy_case("caching", dev), rounds=2)  # returns its first result for every input


# ------------------------------------------------------------------ roofline floor, prediction


def test_a_median_below_the_roofline_fails_the_case_and_a_2x_miss_is_flagged(monkeypatch, tmp_path):
    monkeypatch.setattr(harness, "gpu_preset", lambda: get_gpu("h200"))
    monkeypatch.setattr(harness, "_RECORDED_IDS", set())
    monkeypatch.setattr(predict, "STATIC_DIR", tmp_path)
    plan = timing.Plan("events", l2="flushed")
    case = Case("attention", "decode_attention", "ours", "decode", {"b": 1}, bytes_moved=4.8e9, roofline="hbm",
                provider_kind="ours")  # 1 ms at 4.8 TB/s
    with pytest.raises(harness.BelowRoofline, match=r"attention/decode_attention/ours/decode/b=1: median 0.0005 s is "
                                                    r"below its roofline floor 0.001 s"):
        harness.record(FakeBenchmark(median=0.5e-3), case, plan=plan)
    ok = FakeBenchmark(median=1.5e-3)
    harness.record(ok, Case("attention", "decode_attention", "ours", "decode", {"b": 2}, bytes_moved=4.8e9),
                   plan=plan)
    info = ok.extra_info
    assert info["roofline_floor_s"] == pytest.approx(1e-3) and info["predicted_s"] == pytest.approx(4.8e9 / 4.3e12)
    assert info["vs_predicted"] == pytest.approx(1.5e-3 / (4.8e9 / 4.3e12)) and "prediction_flag" not in info
    slow = FakeBenchmark(median=3e-3)
    harness.record(slow, Case("attention", "decode_attention", "ours", "decode", {"b": 3}, bytes_moved=4.8e9),
                   plan=plan)
    assert slow.extra_info["prediction_flag"].startswith("look: 2.69x slower")


def test_a_static_report_raises_the_prediction_when_it_predicts_slower(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps({"predictions": {
        "logprob/token_logprobs/fwd": {"issue_bound_bytes_per_s": 3.6e12, "note": "18.4 SASS per logit"}}}))
    (tmp_path / "broken.json").write_text("{")
    case = Case("logprob", "token_logprobs", "ours", "fwd", {}, bytes_moved=3.6e9)
    predict.static_predictions.cache_clear()
    try:
        seconds, note = predict.static_estimate(case, str(tmp_path))
        assert seconds == pytest.approx(1e-3) and note == "18.4 SASS per logit"
        info = {}
        predict.annotate(info, case, get_gpu("h200"), 1.2e-3, str(tmp_path))
        assert info["predicted_s"] == pytest.approx(1e-3) and info["prediction_basis"].startswith("static report")
        other = Case("logprob", "linear_token_logprobs", "ours", "fwd", {}, flops=1e9)
        assert predict.static_estimate(other, str(tmp_path))[0] is None
    finally:
        predict.static_predictions.cache_clear()


def test_the_committed_static_reports_are_read_for_the_gpus_own_architecture(tmp_path):
    """``scripts/static_report.py``'s own schema (``kernels["<config>@sm_<arch>"]`` with
    ``issue_bound_tbps``) feeds the prediction of the suite case that config is the default of, on
    the GPU's architecture only."""
    report = {"kernels": {"logprob-fwd-entropy@sm_90": {"issue_bound_tbps": 2.0, "bound": "issue"},
                          "logprob-fwd-entropy@sm_80": {"issue_bound_tbps": 1.0, "bound": "issue"},
                          "pack-F4096-bf16@sm_90": {"issue_bound_tbps": "fast"}}}
    (tmp_path / "triton-x.json").write_text(json.dumps(report))
    case = Case("logprob", "token_logprobs", "ours", "fwd", {}, bytes_moved=4e9)
    pack = Case("packing", "pack", "ours", "fwd", {}, bytes_moved=4e9)
    predict.static_predictions.cache_clear()
    try:
        assert predict.arch_of(get_gpu("h200")) == "sm_90" and predict.arch_of(get_gpu("a100-80g")) == "sm_80"
        seconds, note = predict.static_estimate(case, str(tmp_path), "sm_90")
        assert seconds == pytest.approx(4e9 / 2e12) and note.startswith("logprob-fwd-entropy@sm_90")
        assert predict.static_estimate(case, str(tmp_path), "sm_80")[0] == pytest.approx(4e9 / 1e12)
        assert predict.static_estimate(case, str(tmp_path), None)[0] is None  # an architecture it has no entry for
        assert predict.static_estimate(pack, str(tmp_path), "sm_90")[0] is None  # not a positive number: ignored
        info = {}
        predict.annotate(info, case, get_gpu("h200"), 2.5e-3, str(tmp_path))
        assert info["static_estimate_s"] == pytest.approx(2e-3) and info["predicted_s"] == pytest.approx(2e-3)
        # the committed reports: every mapped config of sm_90 is read
        predict.static_predictions.cache_clear()
        preds, _ = predict.static_predictions(str(predict.STATIC_DIR), "sm_90")
        assert set(predict.STATIC_CASES.values()) <= set(preds), sorted(preds)
    finally:
        predict.static_predictions.cache_clear()


# ---------------------------------------------------------------------------------- thermals


def test_measuring_window_caps_rounds_but_never_below_what_the_gate_needs(monkeypatch):
    assert timing.capped_rounds(30, 0.3, 7, window=2.0) == 7  # 30 x 0.3 s would be 9 s
    assert timing.capped_rounds(30, 0.05, 7, window=2.0) == 30
    assert timing.capped_rounds(30, 0.1, 7, window=2.0) == 20
    assert harness.gate_rounds() == 7
    monkeypatch.setenv(timing.WINDOW_ENV, "0")
    with pytest.raises(ValueError, match="POLYTRACE_BENCH_WINDOW_S must be > 0"):
        timing.window_s()
    monkeypatch.setenv(timing.WINDOW_ENV, "long")
    with pytest.raises(ValueError, match="POLYTRACE_BENCH_WINDOW_S must be a number"):
        timing.window_s()
    monkeypatch.delenv(timing.WINDOW_ENV)
    assert timing.window_s() == 2.0


def test_cooldown_only_between_providers_on_a_gpu(monkeypatch):
    slept = []
    monkeypatch.setattr(harness, "_LAST_PROVIDER", [])
    monkeypatch.setattr(harness, "on_gpu", lambda: True)
    monkeypatch.delenv(harness.COOLDOWN_ENV, raising=False)
    seq = [harness.cool_down(p, sleep=slept.append) for p in ("ours", "ours", "torch", "torch", "ours")]
    assert seq == [0.0, 0.0, 0.5, 0.0, 0.5] and slept == [0.5, 0.5]
    monkeypatch.setattr(harness, "on_gpu", lambda: False)
    assert harness.cool_down("liger", sleep=slept.append) == 0.0 and len(slept) == 2


def test_the_sm_clock_is_sampled_every_round_and_a_10_percent_drop_marks_the_benchmark(monkeypatch):
    monkeypatch.setattr(environment, "_state", {"samples": []})
    dev = FakeDevice()
    timer = timing.plan_timer(dev.work(300e-6), b=dev, clock=timing.DeviceClock())
    clocks = iter([1980, 1975, 1700, 1980])
    timer.sampler = lambda: {"sm_clock_mhz": next(clocks), "sm_clock_max_mhz": 1980, "clock_reasons": []}
    for _ in range(4):
        timer.round()
    assert [s["sm_clock_mhz"] for s in timer.samples] == [1980, 1975, 1700, 1980]
    hot, cool = {}, {}
    environment.judge(timer.samples, hot, "a")
    environment.judge([{"sm_clock_mhz": 1900, "clock_reasons": []}, {"sm_clock_mhz": 1000,
                                                                      "clock_reasons": ["gpu_idle"]}], cool, "b")
    assert hot["throttled"] is True and hot["sm_clock"]["min_mhz"] == 1700  # 1700 < 0.9 x 1980
    assert cool["throttled"] is False and cool["sm_clock"]["samples"] == 1  # an idle-parked sample is no throttle
    assert environment.rejudge() == ["a"] and cool["session_max_mhz"] == 1980
    from polytrace.measure.envrecord import assess

    verdict = assess(None, None, timer.samples, throttled_benchmarks=["a"])
    assert verdict["throttled"] is True and any("1 benchmark(s) ran with the SM clock" in r for r in verdict["reasons"])


def test_the_l2_flush_reads_and_writes_nothing_back(monkeypatch):
    """The flush evicts the L2 by reading its buffer (a sum into a preallocated scalar): a write
    (do_bench's zero_) would leave dirty lines written back inside the next timed window."""
    flush = object.__new__(timing.CudaBackend)  # the CUDA backend's flush, on CPU tensors
    flush.device, flush.flush_bytes, flush._buffer = "cpu", 1 << 16, None
    flush.flush_l2()
    buffer = flush._buffer
    before = buffer.clone()
    for name in ("zero_", "fill_", "copy_", "add_", "mul_", "normal_"):
        monkeypatch.setattr(torch.Tensor, name, lambda *a, **k: pytest.fail("the flush wrote its buffer"))
    flush.flush_l2()
    assert flush._buffer is buffer and torch.equal(buffer, before) and buffer.numel() * 8 == 1 << 16


def test_key_rows_of_dk_dv_are_exact_without_a_whole_sequence_matrix():
    """When every sequence is longer than the whole-sequence budget (a lone 16k response), sampled
    key rows are computed exactly over every query of their sequence, in query chunks."""
    from suites.attention_ref import attention_rows, key_rows_exact

    gen = torch.Generator().manual_seed(7)
    lens = [37, 20, 45]
    q, dout = (torch.randn(102, 4, 8, generator=gen, dtype=torch.float16) for _ in range(2))
    k, v = (torch.randn(102, 2, 8, generator=gen, dtype=torch.float16) for _ in range(2))
    whole = attention_rows(q, k, v, lens, None, dout)["want"]
    rows = checks.subset_rows(102, k=9)
    got = key_rows_exact(q, k, v, dout, lens, rows, chunk=16)
    for name in ("dk", "dv"):
        assert torch.allclose(got[name], whole[name][rows], rtol=0, atol=1e-12), name
        assert bool((got[f"abs_{name}"] >= got[name].abs() - 1e-12).all())


def test_attention_past_the_budget_with_only_long_sequences_checks_sampled_key_rows(monkeypatch):
    ac, s = _attention([20, 23], monkeypatch)  # both longer than the 16-token budget
    assert ac._kv_sequences(s) == []
    cov = ac._coverage(s, "bwd")
    assert (cov["dk"]["checked"], cov["dk"]["of"], cov["dk"]["unit"]) == (43, 43, "key rows")
    truth = ac._truth(s, "bwd")

    def case(bind):
        meta = Case("attention", "varlen_attention", "ref", "bwd", {"T": 43}, provider_kind="peer",
                    extra={"check_coverage": cov})
        return registry.BenchCase("attention", meta, Provider("ref"), ac._inputs(s, True), bind, truth,
                                  ac._compare(s, "ref", "bwd"))

    good = registry.prepare(case(_reference_bind(s)))
    assert good.check["verdict"] == "pass" and any(o["rule"].startswith("float16 of fp32")
                                                   for o in good.check["outputs"] if o["name"] == "dk")
    with pytest.raises(registry.OutputCheckFailed, match="dk"):
        registry.prepare(case(_reference_bind(s, corrupt_rows=slice(30, 32))))
