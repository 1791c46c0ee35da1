"""Measured kernel timings as curves (``polytrace.stepmodel.timings``) and the problem sizes the
pricing asks them at (``polytrace.stepmodel.pricing``): monotone, clamped interpolation, which files
count, and sizes that agree with what the suites record."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _compose_results import bench, family_benches, result_file, write
from hypothesis import given, settings
from hypothesis import strategies as st

from polytrace.errors import PolytraceError
from polytrace.run.models import get_model
from polytrace.stepmodel import pricing
from polytrace.stepmodel.timings import Curve, KernelTimings, Point, paired


def _points(sizes, times, roofline="bf16"):
    return [Point(f"k/{i}", "f", "k", "fwd", "p", {}, float(s), float(s), float(t), roofline, "x.json")
            for i, (s, t) in enumerate(zip(sizes, times))]


def test_curve_interpolates_log_log_and_keeps_the_rate_past_the_ends():
    # t = s^0.5 * 1e-6 between the points: the log-log midpoint is exact, the ends keep their rate
    sizes = np.array([1e6, 1e8, 1e10])
    curve = Curve.fit(_points(sizes, 1e-6 * np.sqrt(sizes)))
    assert curve.seconds(1e7) == pytest.approx(1e-6 * math.sqrt(1e7), rel=1e-12)
    # past the largest size the time grows in proportion (rate clamped), not held at the last time
    assert curve.seconds(4e10) == pytest.approx(4 * curve.seconds(1e10), rel=1e-12)
    # below the smallest, proportional to size at the smallest size's rate
    assert curve.seconds(1e5) == pytest.approx(curve.seconds(1e6) / 10, rel=1e-12)
    assert curve.seconds(0.0) == 0.0
    arr = curve.seconds(np.array([0.0, 1e7, 4e10]))
    assert arr.tolist() == pytest.approx([0.0, curve.seconds(1e7), curve.seconds(4e10)], rel=1e-12)


def test_curve_pools_noisy_points_into_a_non_decreasing_fit():
    # a larger problem measured faster (noise) and two measurements of one size: pooled, averaged
    curve = Curve.fit(_points([1e6, 2e6, 4e6, 4e6, 8e6], [4e-6, 3e-6, 5e-6, 5e-6 * 1.21, 9e-6]))
    assert curve.sizes.tolist() == [1e6, 2e6, 4e6, 8e6]
    assert np.all(np.diff(curve.times) >= 0)
    assert curve.times[0] == pytest.approx(curve.times[1])  # the violating pair pooled
    assert curve.times[2] == pytest.approx(5e-6 * 1.1, rel=1e-12)  # geometric mean of the repeats


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(1e3, 1e15), st.floats(1e-7, 10.0)), min_size=1, max_size=12))
def test_curve_is_monotone_and_positive_anywhere(pairs):
    curve = Curve.fit(_points([s for s, _ in pairs], [t for _, t in pairs]))
    grid = np.geomspace(1.0, 1e17, 400)
    times = curve.seconds(grid)
    assert np.all(np.isfinite(times)) and np.all(times > 0)
    assert np.all(np.diff(times) >= -1e-12 * times[1:])
    lo, hi = curve.sizes[0], curve.sizes[-1]
    assert curve.seconds(hi * 3) == pytest.approx(3 * curve.times[-1], rel=1e-9)
    assert curve.seconds(lo / 3) == pytest.approx(curve.times[0] / 3, rel=1e-9)


def test_axis_follows_the_roofline_field():
    assert Curve.fit(_points([1e9, 2e9], [1e-3, 2e-3], "bf16")).axis == "flops"
    assert Curve.fit(_points([1e9, 2e9], [1e-3, 2e-3], "hbm")).axis == "bytes"
    plan = [Point("p", "packing", "plan_microbatches", "plan", "ours", {"sequences": n}, 0.0, 0.0, 1e-6 * n, "hbm",
                  "x.json") for n in (100, 1000)]
    curve = Curve.fit(plan)
    assert curve.axis == "sequences" and curve.seconds(500) == pytest.approx(5e-4)


def test_discover_keeps_each_benchmarks_latest_run_and_never_cpu_timings(tmp_path):
    old = [bench("packing", "pack", "fwd", "ours", {"T": 10}, flops=0, nbytes=1e6, roofline="hbm", median=1.0)]
    new = [bench("packing", "pack", "fwd", "ours", {"T": 10}, flops=0, nbytes=1e6, roofline="hbm", median=2.0)]
    write(tmp_path / "h200" / "2026-11-01_a_packing.json", result_file(old, datetime="2026-11-01T00:00:00"))
    write(tmp_path / "h200" / "2026-11-05_b_packing.json", result_file(new, datetime="2026-11-05T00:00:00"))
    cpu = [bench("packing", "unpack", "fwd", "ours", {"T": 10}, flops=0, nbytes=1e6, roofline="hbm", median=9.0,
                 measured_on="cpu-interpreter")]
    write(tmp_path / "h200" / "2026-11-06_c_packing.json", result_file(cpu, measured_on="cpu-interpreter"))
    found = KernelTimings.discover("h200", tmp_path)
    assert [p.median_s for p in found.points] == [2.0]
    assert found.curve("packing", "unpack", "fwd", "ours") is None
    assert not KernelTimings.discover("h100-sxm", tmp_path)


def test_a_broken_file_in_the_store_is_an_error_naming_it(tmp_path):
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "bad.json").write_text("{not json")
    with pytest.raises(PolytraceError, match="bad.json"):
        KernelTimings.discover("h200", tmp_path)


@pytest.mark.parametrize("median", [1e300, 4000.0, 1e-12])
def test_a_median_no_kernel_launch_takes_is_refused(tmp_path, median):
    b = [bench("attention", "decode_attention", "decode", "ours", {"B": 1}, flops=1.0, nbytes=1e6, roofline="hbm",
               median=median)]
    path = write(tmp_path / "x.json", result_file(b))
    # beyond [1 ns, 10^6 s] the results reader refuses the round itself (polytrace/measure/results/validation.py);
    # within it, the estimate refuses a median above 1 h
    with pytest.raises(PolytraceError, match=r"x.json: benchmark '(attention/decode_attention/ours/decode/B=1': "
                                             r"median .* s is not the time of one kernel launch|"
                                             r"test_decode_attention\[.*\]': 'stats.data': round 0 is)"):
        KernelTimings.from_paths([path], "h200", "--results")


def test_given_files_must_be_gpu_timings_of_the_gpu_asked_for(tmp_path):
    h100 = write(tmp_path / "h100.json", result_file(family_benches("packing"), gpu="NVIDIA H100 80GB HBM3",
                                                      slug="h100-sxm"))
    with pytest.raises(PolytraceError, match=r"--results .*h100.json: measured on NVIDIA H100.*not --gpu h200"):
        KernelTimings.from_paths([h100], "h200", "--results")
    cpu = write(tmp_path / "cpu.json", result_file(family_benches("packing", measured_on="cpu-interpreter"),
                                                   measured_on="cpu-interpreter"))
    with pytest.raises(PolytraceError, match="cpu-interpreter, not a GPU"):
        KernelTimings.from_paths([cpu], "h200", "--results")
    h200 = write(tmp_path / "h200.json", result_file(family_benches("packing")))
    with pytest.raises(PolytraceError, match="different GPUs"):
        KernelTimings.from_paths([h200, h100], None, "BASELINE")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolytraceError, match="folder holds no"):
        KernelTimings.from_paths([tmp_path / "empty"], "h200", "--results")


def test_paired_compares_only_common_benchmarks_and_shares_one_sided_kernels(tmp_path):
    base = family_benches("packing") + family_benches("decode")
    # the candidate re-measured packing only, 10% slower, and its budget cut one pack shape
    cand = [b for b in family_benches("packing", factor=1.1) if b["extra_info"]["shape"].get("T") != 32768]
    tb = KernelTimings.from_paths([write(tmp_path / "b.json", result_file(base))], "h200", "BASELINE")
    tc = KernelTimings.from_paths([write(tmp_path / "c.json", result_file(cand))], "h200", "CANDIDATE")
    pb, pc = paired(tb, tc)
    # decode measured by the baseline only: both sides price it from the baseline
    assert pb.curve("attention", "decode_attention", "decode", "ours").times.tolist() == \
        pc.curve("attention", "decode_attention", "decode", "ours").times.tolist()
    # the cut shape is left out of both sides, so the curves differ by exactly the 10%
    cb, cc = pb.curve("packing", "pack", "fwd", "ours"), pc.curve("packing", "pack", "fwd", "ours")
    assert cb.sizes.tolist() == cc.sizes.tolist() and len(cb.sizes) == 4
    assert (cc.times / cb.times) == pytest.approx(1.1, rel=1e-12)


# --- the sizes pricing asks at are the ones the suites record ------------------------------------
def test_query_sizes_are_the_kernel_specs_own_functions():
    """Pricing sizes its queries with the spec functions the suites record (``families.py``), at
    the step model's arrays as at the suites' lists of lengths."""
    from polytrace.stepmodel.families import size_fn
    from polytrace_kernels.attention import spec as attention_spec
    from polytrace_kernels.logprob import spec as logprob_spec
    from polytrace_kernels.packing import spec as packing_spec

    assert size_fn("logprob", "token_logprobs") is logprob_spec.logits_bytes
    assert size_fn("logprob", "linear_token_logprobs") is logprob_spec.matmul_flops
    assert size_fn("packing", "pack") is packing_spec.pack_bytes
    assert size_fn("packing", "unpack") is packing_spec.unpack_bytes
    lens = [300, 17, 4096]
    pairs = np.array([sum(x * x for x in lens) / 2.0, 9.0 / 2.0])
    for mode in ("fwd", "bwd"):
        got = size_fn("attention", "varlen_attention")(pairs, 40, 128, mode=mode)
        assert got[0] == attention_spec.varlen_attention_flops(lens, 40, 128, causal=True, mode=mode)
        assert got[1] == attention_spec.varlen_attention_flops([3], 40, 128, causal=True, mode=mode)
    decode = size_fn("decode", "decode_attention")(np.array([3.0, 1.0]), np.array([sum(lens), 17.0]), 40, 8, 128)
    assert list(decode) == [attention_spec.decode_attention_bytes(lens, 40, 8, 128, dtype="bf16"),
                            attention_spec.decode_attention_bytes([17], 40, 8, 128, dtype="bf16")]
    for mode in ("fwd", "fwd+bwd"):
        got = logprob_spec.logits_bytes(np.array([1000.0, 3.0]), 152064.0, "bf16", mode)
        assert list(got) == [logprob_spec.logits_bytes(t, 152064, "bf16", mode) for t in (1000, 3)]
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        logprob_spec.logits_bytes(-1, 152064, "bf16", "fwd")  # numbers are still checked


@pytest.mark.parametrize("name", ["qwen2.5-32b", "llama-3.1-8b", "qwen3-30b-a3b", "gemma-2-2b"])
def test_linear_layers_carry_the_models_matmul_flops(name):
    model = get_model(name)
    per_token = sum(2.0 * lin.n * lin.k * lin.per_layer * lin.token_share for lin in pricing.linear_layers(model))
    # the model's count includes the qkv bias and (lm_head=False) a one-column value head
    assert per_token * model.layers == pytest.approx(model.matmul_flops_per_token(lm_head=False), rel=1e-4)


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**12), st.text(max_size=6),
                    st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=2))
_KERNELS = [("attention", "decode_attention", "decode"), ("attention", "varlen_attention", "fwd"),
            ("logprob", "token_logprobs", "fwd"), ("gemm", "linear", "fwd"), ("packing", "plan_microbatches", "plan")]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KERNELS), _VALUES, _VALUES, _VALUES, _VALUES, _VALUES),
                min_size=1, max_size=4))
def test_any_field_values_give_a_clean_error_or_a_finite_estimate(entries):
    from polytrace.measure.results import parse_result
    from polytrace.stepmodel import estimate

    benches = []
    for i, ((family, kernel, mode), median, flops, nbytes, roofline, seqs) in enumerate(entries):
        b = bench(family, kernel, mode, "ours" if family != "gemm" else "torch",
                  {"i": i, "model": "qwen2.5-1.5b", "layer": "qkv", "sequences": seqs}, flops=flops, nbytes=nbytes,
                  roofline=roofline, median=1e-3)
        b["extra_info"]["median_s"] = median
        b["stats"] = {"median": median, "data": [median] if isinstance(median, (int, float)) else []}
        benches.append(b)
    try:
        timings = KernelTimings.from_results([parse_result(result_file(benches), "f.json")], "h200", "--results")
        res = estimate("dapo-math-32b", "qwen2.5-1.5b", "h200", 1, steps=[0], prompts=4, results=timings)
    except PolytraceError as exc:
        assert "\n" not in str(exc)
        return
    numbers = [res.summary["mean_step_s"], *(v["s"] for f in res.summary["kernels"].values() for v in f.values())]
    assert all(math.isfinite(x) and x >= 0 for x in numbers)
