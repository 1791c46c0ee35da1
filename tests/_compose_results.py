"""Result files for the composition tests: every kernel family the estimate prices, "measured" on
a CUDA GPU with known medians (a rate plus a fixed launch latency per kernel, so time grows with
size as on a real device), in the schema the suites write (results/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

from polytrace.run.models import get_model
from polytrace.stepmodel.pricing import MEASURED, linear_layers
from polytrace_kernels.logprob import spec as logprob_spec

GPU_NAME = "NVIDIA H200"
LATENCY_S = 5e-6
# achieved rates of the synthetic kernels: FLOP/s for compute-bound, bytes/s for bandwidth-bound
RATES = {"gemm": 600e12, "attention": 380e12, "decode": 3.6e12, "logprob": 3.9e12, "logprob-fused": 520e12,
         "packing": 3.0e12}
GEMM_TOKENS = (64, 256, 1024, 4096, 16384, 65536)
TOKENS = (512, 2048, 8192, 16384, 32768)


def bench(family: str, kernel: str, mode: str, provider: str, shape: dict, *, flops: float, nbytes: float,
          roofline: str, median: float, kind: str = "ours", measured_on: str = "cuda",
          profile: str = "dapo-math-32b") -> dict:
    shape_id = ",".join(f"{k}={v}" for k, v in shape.items())
    rounds = [median * f for f in (0.99, 1.0, 1.0, 1.01, 1.0)]
    return {
        "name": f"test_{kernel}[{provider}-{mode}-{shape_id}]",
        "fullname": f"suites/test_{family}.py::test_{kernel}[{provider}-{mode}-{shape_id}]",
        "extra_info": {"family": family, "kernel": kernel, "provider": provider, "provider_kind": kind, "mode": mode,
                       "shape": shape, "shape_id": shape_id, "profile": profile, "seed": 0, "step": 0, "weight": 0.1,
                       "flops": flops, "bytes_moved": nbytes, "roofline": roofline, "measured_on": measured_on,
                       "device_name": GPU_NAME if measured_on == "cuda" else "cpu", "median_s": median},
        "stats": {"median": median, "min": min(rounds), "max": max(rounds), "rounds": len(rounds), "data": rounds},
    }


def result_file(benches: list[dict], *, gpu: str = GPU_NAME, slug: str = "h200", measured_on: str = "cuda",
                datetime: str = "2026-11-02T10:00:00+00:00", commit: str = "abc1234") -> dict:
    return {"machine_info": {"node": "synthetic", "polytrace": {
        "measured_on": measured_on, "gpu_name": gpu, "gpu_slug": slug if measured_on == "cuda" else "cpu",
        "commit": commit, "kernel_hashes": {}}}, "commit_info": {"id": commit}, "benchmarks": benches,
        "datetime": datetime, "version": "5.2.3"}


def write(path: Path, obj: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def family_benches(family: str, *, model: str = "qwen2.5-32b", provider: str | None = None, factor: float = 1.0,
                   measured_on: str = "cuda", gemm_tokens=GEMM_TOKENS, rates: dict | None = None,
                   latency: float = LATENCY_S) -> list[dict]:
    """The benchmarks of one breakdown family (``pricing.MEASURED``): median = ``factor`` x
    (``latency`` + size / rate), ``rates`` overriding ``RATES``."""
    rate = {**RATES, **(rates or {})}

    def _t(size: float, achieved: float, factor: float) -> float:
        return factor * (latency + size / achieved)

    spec = get_model(model)
    provider = provider or MEASURED[family].default_provider
    kind = "baseline" if family == "gemm" else "ours"
    out = []
    kw = dict(measured_on=measured_on, kind=kind)
    if family == "gemm":
        layers = {lin.layer: lin for lin in linear_layers(spec)}
        layers["lm_head"] = type(next(iter(layers.values())))("lm_head", spec.vocab, spec.hidden)
        for name, lin in layers.items():
            for m in gemm_tokens:
                f = 2.0 * m * lin.n * lin.k
                nbytes = 2.0 * (m * lin.k + lin.n * lin.k + m * lin.n)
                shape = {"model": model, "layer": name, "M": m, "N": lin.n, "K": lin.k, "dtype": "bf16"}
                out.append(bench("gemm", "linear", "fwd", provider, shape, flops=f, nbytes=nbytes, roofline="bf16",
                                 median=_t(f, rate["gemm"], factor), **kw))
                out.append(bench("gemm", "linear", "bwd", provider, shape, flops=2 * f, nbytes=2 * nbytes,
                                 roofline="bf16", median=_t(2 * f, rate["gemm"], factor), **kw))
    elif family == "attention":
        hq, hkv, d = spec.heads, spec.kv_heads, spec.head_dim
        for n, seq in sorted({(max(t // s, 1), min(s, t)) for t in TOKENS for s in (256, 1024, 4096)}):
            fwd = 4.0 * d * hq * n * seq * seq / 2
            nbytes = 4.0 * n * seq * (hq + hkv) * d
            shape = {"model": model, "B": n, "T": n * seq, "max_len": seq, "Hq": hq, "Hkv": hkv, "D": d}
            out.append(bench("attention", "varlen_attention", "fwd", provider, shape, flops=fwd, nbytes=nbytes,
                             roofline="bf16", median=_t(fwd, rate["attention"], factor), **kw))
            out.append(bench("attention", "varlen_attention", "bwd", provider, shape, flops=2.5 * fwd,
                             nbytes=2 * nbytes, roofline="bf16",
                             median=_t(2.5 * fwd, rate["attention"], factor), **kw))
    elif family == "decode":
        hq, hkv, d = spec.heads, spec.kv_heads, spec.head_dim
        for batch in (1, 16, 64, 256):
            for kv in (256, 2048, 16384):
                nbytes = 2.0 * batch * kv * hkv * d * 2 + 2.0 * batch * hq * d * 2 + 4.0 * batch
                shape = {"model": model, "batch": batch, "kv_len_mean": kv, "kv_len_max": kv, "heads_q": hq,
                         "heads_kv": hkv, "head_dim": d}
                out.append(bench("attention", "decode_attention", "decode", provider, shape,
                                 flops=4.0 * d * hq * batch * kv, nbytes=nbytes, roofline="hbm",
                                 median=_t(nbytes, rate["decode"], factor), **kw))
    elif family == "logprob":
        for t in TOKENS:
            for mode in ("fwd", "fwd+bwd"):
                shape = {"T": t, "V": spec.vocab, "dtype": "bf16", "model": "qwen2.5"}
                nbytes = logprob_spec.logits_bytes(float(t), float(spec.vocab), "bf16", mode)
                out.append(bench("logprob", "token_logprobs", mode, provider, shape, flops=6.0 * t * spec.vocab,
                                 nbytes=nbytes, roofline="hbm", median=_t(nbytes, rate["logprob"], factor), **kw))
                f = logprob_spec.matmul_flops(float(t), float(spec.vocab), float(spec.hidden), mode)
                shape = {"T": t, "V": spec.vocab, "H": spec.hidden, "dtype": "bf16", "model": model}
                out.append(bench("logprob", "linear_token_logprobs", mode, provider, shape, flops=f,
                                 nbytes=2.0 * t * spec.hidden, roofline="bf16",
                                 median=_t(f, rate["logprob-fused"], factor), **kw))
    elif family == "packing":
        for t in TOKENS:
            b = max(t // 1024, 1)
            pack = 2.0 * t * 4096 * 2 + 4 * (b + 1)
            unpack = t * 4096 * 2 + b * 4096 * 4096 * 2 + 4 * (b + 1)
            shape = {"mb": f"m{t}", "B": b, "max_len": 4096, "T": t, "hidden": 4096, "dtype": "bf16"}
            out.append(bench("packing", "pack", "fwd", provider, shape, flops=0.0, nbytes=pack, roofline="hbm",
                             median=_t(pack, rate["packing"], factor), **kw))
            out.append(bench("packing", "unpack", "fwd", provider, shape, flops=0.0, nbytes=unpack, roofline="hbm",
                             median=_t(unpack, rate["packing"], factor), **kw))
        for seqs in (128, 768, 8192):
            shape = {"profile": "dapo-math-32b", "sequences": seqs, "ranks": 8, "max_tokens": 16384}
            out.append(bench("packing", "plan_microbatches", "plan", provider, shape, flops=0.0, nbytes=0.0,
                             roofline="hbm", median=factor * 1.5e-6 * seqs, **kw))
    else:
        raise ValueError(family)
    return out


def all_benches(*, model: str = "qwen2.5-32b", factors: dict | None = None, **kw) -> list[dict]:
    factors = factors or {}
    return [b for fam in MEASURED for b in family_benches(fam, model=model, factor=factors.get(fam, 1.0), **kw)]
