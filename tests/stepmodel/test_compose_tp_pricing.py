"""Measured kernel timings under tensor parallelism: a shard is priced as the sharded shape.

Timings that sit exactly on the roofline's own rates (every family, every size, no launch
latency) must reproduce the roofline estimate at rollout TP and Megatron TP 1, 2, 4 and 8, for
every stage of a PPO step. A decode GEMM shard reads 1/tp of the weights: pricing it as the whole
layer at 1/tp of the tokens made ``gen`` 1.7x the roofline at TP 2 and 2.9x at TP 4. Labels say
"measured" only where the timings cover the work, else "extrapolated xF" or "roofline (why)".
"""

from __future__ import annotations

import numpy as np
import pytest
from _compose_results import bench, result_file, write

from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.stepmodel import estimate
from polytrace.stepmodel.efficiency import DEFAULT
from polytrace.stepmodel.pricing import MEASURED, linear_layers
from polytrace_kernels.attention import spec as attention_spec
from polytrace_kernels.logprob import spec as logprob_spec
from polytrace_kernels.packing import spec as packing_spec

MODEL, GPU = "qwen3-8b", "h200"  # 32 query and 8 KV heads: TP up to 8 divides both
H200 = get_gpu(GPU)
COMPUTE = H200.ceiling("bf16") * DEFAULT.gemm  # the roofline's GEMM rate, FLOP/s
DECODE_HBM = H200.ceiling("hbm") * DEFAULT.decode_hbm  # its decode (weight and KV read) rate, B/s
ELEMENTWISE = H200.ceiling("hbm") * DEFAULT.elementwise_hbm


def _gemm_tokens() -> list[float]:
    """Batches from 1 to 2^20 tokens by 2x, plus the roofline's crossover (FLOPs per weight byte =
    the batch: compute and weight reads take equal time at COMPUTE / DECODE_HBM tokens), so the
    log-log interpolation of max(compute, memory) is exact on both sides of the kink."""
    return sorted({float(2 ** i) for i in range(21)} | {COMPUTE / DECODE_HBM})


def roofline_benches(model_name: str = MODEL) -> list[dict]:
    """Every measured family's timings at the roofline's own rates (``efficiency.DEFAULT``)."""
    spec = get_model(model_name)
    out = []
    lins = {lin.layer: lin for lin in linear_layers(spec)}
    lins["lm_head"] = type(lins["o"])("lm_head", spec.vocab, spec.hidden)
    for name, lin in lins.items():
        for m in _gemm_tokens():
            f = 2.0 * m * lin.n * lin.k
            weights = 2.0 * lin.n * lin.k
            shape = {"model": model_name, "layer": name, "M": m, "N": lin.n, "K": lin.k, "dtype": "bf16"}
            out.append(bench("gemm", "linear", "fwd", "torch", shape, flops=f, nbytes=weights, roofline="bf16",
                             median=max(f / COMPUTE, weights / DECODE_HBM), kind="baseline"))
            out.append(bench("gemm", "linear", "bwd", "torch", shape, flops=2 * f, nbytes=2 * weights,
                             roofline="bf16", median=2 * f / COMPUTE, kind="baseline"))
    attn_rate = H200.ceiling("bf16") * DEFAULT.attention
    for seq in (64, 1024, 16384, 262144):
        fwd = 4.0 * spec.head_dim * spec.heads * seq * seq / 2
        shape = {"model": model_name, "B": 1, "T": seq, "max_len": seq}
        out.append(bench("attention", "varlen_attention", "fwd", "ours", shape, flops=fwd, nbytes=1.0,
                         roofline="bf16", median=fwd / attn_rate))
        out.append(bench("attention", "varlen_attention", "bwd", "ours", shape, flops=2.5 * fwd, nbytes=1.0,
                         roofline="bf16", median=2.5 * fwd / attn_rate))
    for batch in (1, 64, 1024):
        for kv in (256, 65536):
            nbytes = attention_spec.decode_attention_bytes_from_totals(batch, batch * kv, spec.heads, spec.kv_heads,
                                                                       spec.head_dim)
            shape = {"model": model_name, "batch": batch, "kv_len_mean": kv}
            out.append(bench("attention", "decode_attention", "decode", "ours", shape, flops=1.0, nbytes=nbytes,
                             roofline="hbm", median=nbytes / DECODE_HBM))
    # eager torch's logits passes: the roofline moves ``logit_bytes_per_element`` bytes per logit
    # where the suite counts the bf16 logits (2 bytes) as the kernel's size
    logits_rate = ELEMENTWISE * 2.0 / DEFAULT.logit_bytes_per_element
    for t in (16, 1024, 65536, 1 << 20):
        for mode in ("fwd", "fwd+bwd"):
            nbytes = logprob_spec.logits_bytes(float(t), float(spec.vocab), "bf16", mode)
            out.append(bench("logprob", "token_logprobs", mode, MEASURED["logprob"].default_provider,
                             {"T": t, "V": spec.vocab}, flops=1.0, nbytes=nbytes, roofline="hbm",
                             median=nbytes / logits_rate, kind="baseline"))
    for t in (1024, 65536, 1 << 20, 1 << 24):
        nbytes = packing_spec.pack_bytes(t, 1, (), 8)
        out.append(bench("packing", "pack", "fwd", "ours", {"T": t}, flops=0.0, nbytes=nbytes, roofline="hbm",
                         median=nbytes / ELEMENTWISE))
        out.append(bench("packing", "unpack", "fwd", "ours", {"T": t}, flops=0.0, nbytes=4.0 * nbytes,
                         roofline="hbm", median=4.0 * nbytes / ELEMENTWISE))
    for seqs in (8, 1024, 65536):
        out.append(bench("packing", "plan_microbatches", "plan", "ours", {"sequences": seqs}, flops=0.0,
                         nbytes=0.0, roofline="hbm", median=DEFAULT.plan_s_per_sequence * seqs))
    return out


@pytest.fixture(scope="module")
def roofline_files(tmp_path_factory):
    return [str(write(tmp_path_factory.mktemp("tp") / "roofline.json", result_file(roofline_benches())))]


def _est(tp: int, **kw):
    return estimate("dapo-math-32b", MODEL, GPU, 8, steps=[0], prompts=8, rollout_tp=tp, strategy="megatron",
                    train_tp=tp, algorithm="ppo", **kw)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_timings_on_the_rooflines_rates_return_the_roofline_at_every_tp(roofline_files, tp):
    measured = _est(tp, results=roofline_files)
    roofline = _est(tp, results_root="/nonexistent")
    fams = measured.summary["families"]
    for family in MEASURED:  # the comparison is of measured prices, not the roofline with itself
        assert fams[family]["status"] == "measured", (family, fams[family])
    m, r = measured.summary["mean_stages_s"], roofline.summary["mean_stages_s"]
    assert set(s for s, v in r.items() if v > 0) == {"gen", "old_log_prob", "ref", "values", "update_critic",
                                                    "update_actor"}
    for stage in r:
        # left over: the suites' causal L^2/2 against the roofline's L(L+1)/2 pairs, the decode
        # kernel's query bytes beside the KV cache, the qkv bias (each under 0.5%)
        assert m[stage] == pytest.approx(r[stage], rel=5e-3), (tp, stage, m[stage], r[stage])
    mk, rk = measured.summary["kernels"]["gen"], roofline.summary["kernels"]["gen"]
    # the roofline also reads the embedding rows of the running sequences (a gather, under 1e-4 of it)
    assert mk["gemm"]["s"] == pytest.approx(rk["gemm"]["s"], rel=1e-4), tp


def test_a_shard_reads_a_tp_th_of_the_weights(roofline_files):
    """8 prompts x 16 responses on 8 GPUs: at most 128 running sequences per engine, below the
    ~160-token crossover, so every decode GEMM is weight-read bound. The iterations are the same
    at any TP (the longest response sets them) and each GPU reads 1/tp of the weights per
    iteration: the rollout's GEMM seconds are TP 1's divided by tp."""
    gemm = {tp: _est(tp, results=roofline_files).summary["kernels"]["gen"]["gemm"]["s"] for tp in (1, 2, 4, 8)}
    for tp in (2, 4, 8):
        assert gemm[tp] == pytest.approx(gemm[1] / tp, rel=1e-3), gemm


def test_labels_say_extrapolated_or_roofline_where_timings_do_not_cover(tmp_path):
    from _compose_results import family_benches

    # packing measured on 4096-feature rows, asked for 1-column id rows: hundreds of x below
    files = [str(write(tmp_path / "pack.json", result_file(family_benches("packing", model="qwen2.5-1.5b"))))]
    res = estimate("dapo-math-32b", "qwen2.5-1.5b", GPU, 1, steps=[0], prompts=8, results=files)
    src = res.summary["families"]["packing"]["sources"]["update_actor"]
    assert "extrapolated x" in src, src
    factor = float(src.split("extrapolated x")[1].split()[0])
    assert factor > 100, src
    # GEMMs timed from 4096 tokens up: decode batches (< 200 sequences) are never priced from them
    files = [str(write(tmp_path / "gemm.json", result_file(family_benches("gemm", model="qwen2.5-1.5b",
                                                                         gemm_tokens=(4096, 16384, 65536)))))]
    res = estimate("dapo-math-32b", "qwen2.5-1.5b", GPU, 1, steps=[0], prompts=8, results=files)
    gen = res.summary["families"]["gemm"]["sources"]["gen"]
    assert gen.startswith("roofline (decode batches below"), gen


def test_extrapolation_factor_is_the_distance_outside_the_measured_sizes():
    from polytrace.stepmodel.pricing import extrapolation_factor
    from polytrace.stepmodel.timings import Curve

    curve = Curve(("f", "k", "m", "p"), "bytes", np.array([10.0, 100.0]), np.array([1.0, 10.0]), ("x",))
    assert extrapolation_factor(curve, 50.0) == 1.0
    assert extrapolation_factor(curve, np.array([0.0, 2.5, 50.0])) == pytest.approx(4.0)
    assert extrapolation_factor(curve, 1000.0) == pytest.approx(10.0)


def _decode_attention(model: str, tp: int, pricer=None) -> float:
    """One decode iteration's attention seconds per GPU: 64 running sequences of 4K context."""
    from polytrace.run.spec import Rollout
    from polytrace.stepmodel.rollout import iteration_parts

    parts, _ = iteration_parts(get_model(model), H200, Rollout(rollout_tp=tp), np.array([64.0]),
                               np.array([64 * 4096.0]), pricer=pricer)
    return float(parts["decode"][0])


def test_decode_attention_reads_the_kv_heads_each_gpu_holds():
    """Past tp = kv_heads vLLM replicates the KV heads, and an MLA latent is on every GPU: each GPU
    reads its own copy, so splitting the engine further does not make its cache reads cheaper."""
    # Qwen3-235B, 4 KV heads: a GPU holds 2 at TP 2, 1 from TP 4 on
    att = {tp: _decode_attention("qwen3-235b-a22b", tp) for tp in (2, 4, 8, 16)}
    assert att[4] == pytest.approx(att[2] / 2, rel=1e-9)
    assert att[8] == pytest.approx(att[4], rel=1e-9) and att[16] == pytest.approx(att[4], rel=1e-9)
    # the bytes it reads at TP 16: 64 x 4096 tokens x one KV head's K and V in all 94 layers
    spec = get_model("qwen3-235b-a22b")
    one_head = 64 * 4096 * 2 * spec.layers * spec.head_dim * 2
    assert att[16] == pytest.approx(one_head / DECODE_HBM, rel=1e-6)
    # DeepSeek-V3's latent (512 + 64 per layer) is read whole at any TP
    mla = {tp: _decode_attention("deepseek-v3", tp) for tp in (1, 8, 32)}
    latent = 64 * 4096 * get_model("deepseek-v3").kv_bytes_per_token()
    assert mla[1] == pytest.approx(latent / DECODE_HBM, rel=1e-6)
    assert mla[8] == pytest.approx(mla[1], rel=1e-9) and mla[32] == pytest.approx(mla[1], rel=1e-9)
    # while the heads split (Qwen3-8B, 8 KV heads) each GPU reads 1/tp
    gqa = {tp: _decode_attention(MODEL, tp) for tp in (1, 8)}
    assert gqa[8] == pytest.approx(gqa[1] / 8, rel=1e-9)


@pytest.mark.parametrize("model, tps", [("gemma-2-2b", (4, 8)), ("deepseek-v3", (8, 32))])
def test_measured_decode_attention_prices_the_replicated_heads_too(tmp_path, model, tps):
    """A decode-attention timing on the roofline's rate returns the roofline where each GPU holds
    a copy: gemma-2-2b's 4 KV heads at TP 8 (one each), DeepSeek-V3's latent at any TP (priced as
    the KV heads of the same bytes). Left over: the query bytes beside the cache (under 0.5% here)."""
    from polytrace.stepmodel.estimate import load_timings
    from polytrace.stepmodel.pricing import Pricer

    files = [str(write(tmp_path / "r.json", result_file(roofline_benches(model))))]
    timings, _ = load_timings(GPU, files)
    pricer = Pricer(H200, DEFAULT, timings)
    for tp in tps:
        assert _decode_attention(model, tp, pricer) == pytest.approx(_decode_attention(model, tp), rel=5e-3), tp
