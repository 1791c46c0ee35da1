#!/usr/bin/env python
"""The first GPU run's probe of the kernel decisions the static report made from compiled code.

Times, on the GPU at hand (CUDA events via ``triton.testing.do_bench``, L2 not flushed: each case
moves far more than L2), the alternatives of each decision and prints one line per decision:

- log-prob forward block size: BLOCK_V 4096 / 8192 / 16384 on [8192, 151936] bf16 logits, and the
  rate against a device copy of the same bytes (the goal: >= 85% of copy bandwidth);
- fused LM head vs ``torch.mm``: ``linear_token_logprobs`` forward against the bare matmul of the
  same [4096, 3584] x [151936, 3584] (the goal: <= 1.15x);
- attention tiles: the default and the short-sequence tile on one 32k sequence, a mixed micro-batch
  and 8192 sequences of 34 tokens, against torch's ``varlen_attn`` where this torch has it;
- decode tail: the split count ``choose_split_tokens`` picks against 1-64 splits, for B = 1, 4, 11
  at 1.5-3.3k tokens.

``--tuning-dir DIR`` writes the log-prob winner as a tuned config there (the format of
``kernels/_tuning.py``), so suites run afterwards with ``POLYTRACE_TUNING_DIR=DIR`` use it.
``--list`` prints the plan without a GPU. Exit status: 0 when every probe ran, 1 when one raised
(named on its own ``probe FAILED:`` line; the others still run), 3 without a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBES = ("logprob_block", "fused_vs_mm", "attention_tiles", "decode_splits")


def _bench(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=5, rep=40)) * 1e-3  # seconds


def logprob_block(tuning_dir: Path | None) -> dict:
    import torch

    from polytrace_kernels.logprob import api, configs

    T, V = 8192, 151936
    logits = torch.randn(T, V, device="cuda", dtype=torch.bfloat16)
    tokens = torch.randint(0, V, (T,), device="cuda")
    times = {}
    for bv in (4096, 8192, 16384):
        cfg = {"BLOCK_V": bv, "num_warps": 8, "num_stages": 1}
        times[bv] = _bench(lambda cfg=cfg: api.token_logprobs(logits, tokens, config=cfg, check_tokens=False))
    dst = torch.empty_like(logits)
    copy_s = _bench(lambda: dst.copy_(logits))
    best = min(times, key=times.get)
    read_rate = T * V * 2 / times[best]
    copy_rate = 2 * T * V * 2 / copy_s  # read + write
    out = {"times_s": times, "best_BLOCK_V": best, "default_BLOCK_V": configs.default_logits_fwd_config(
        torch.bfloat16, torch.cuda.get_device_capability())["BLOCK_V"], "read_tbps": read_rate / 1e12,
        "copy_tbps": copy_rate / 1e12, "fraction_of_copy": read_rate / copy_rate}
    if tuning_dir is not None:
        _write_tuning(tuning_dir, "token_logprobs", "logprob",
                      {configs.tuning_bucket(V, torch.bfloat16): {"BLOCK_V": best, "num_warps": 8, "num_stages": 1,
                                                                  "time_s": times[best]}})
    return out


def _write_tuning(root: Path, kernel: str, family: str, configs: dict) -> None:
    import torch

    from polytrace.run.hardware import slug_for
    from polytrace_kernels._tuning import folder_source_hash

    name = torch.cuda.get_device_name()
    folder = root / slug_for(name)
    folder.mkdir(parents=True, exist_ok=True)
    data = {"kernel": kernel, "device_name": name, "gpu_slug": slug_for(name), "family": family,
            "kernel_hash": folder_source_hash(ROOT / "kernels" / family), "configs": configs,
            "made_by": "scripts/device_probe.py"}
    (folder / f"{kernel}.json").write_text(json.dumps(data, indent=1) + "\n")


def fused_vs_mm() -> dict:
    import torch

    from polytrace_kernels.logprob import api

    T, H, V = 4096, 3584, 151936
    hidden = torch.randn(T, H, device="cuda", dtype=torch.bfloat16) * 0.05
    weight = torch.randn(V, H, device="cuda", dtype=torch.bfloat16) * 0.05
    tokens = torch.randint(0, V, (T,), device="cuda")
    fused = _bench(lambda: api.linear_token_logprobs(hidden, weight, tokens, check_tokens=False))
    mm = _bench(lambda: torch.mm(hidden, weight.t()))
    return {"fused_s": fused, "mm_s": mm, "ratio": fused / mm, "goal_ratio": 1.15}


def attention_tiles() -> dict:
    import torch

    from polytrace_kernels.attention import api

    d, hq, hkv = 128, 32, 8
    cases = {"one-32k": [32768], "micro-batch": [4096, 2048, 1500, 900, 700, 400, 300, 200] * 2,
             "8192x34": [34] * 8192}
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        varlen_attn = None
    out = {}
    for name, lens in cases.items():
        total = sum(lens)
        q = torch.randn(total, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(total, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(total, hkv, d, device="cuda", dtype=torch.bfloat16)
        cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
        cu[1:] = torch.tensor(lens).cumsum(0)
        cu = cu.cuda()
        mx = max(lens)
        row = {}
        cap = torch.cuda.get_device_capability()
        for tile, cfg in (("default", api.default_fwd_config(d, torch.bfloat16, capability=cap)),
                          ("short", api.short_fwd_config(d, torch.bfloat16, capability=cap))):
            row[tile] = _bench(lambda cfg=cfg, q=q, k=k, v=v, cu=cu, mx=mx: api.varlen_attention(
                q, k, v, cu, cu, mx, mx, causal=True, config=cfg, check_inputs=False))
        if varlen_attn is not None:
            kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
            try:
                row["torch_varlen_attn"] = _bench(lambda q=q, kr=kr, vr=vr, cu=cu, mx=mx: varlen_attn(
                    q, kr, vr, cu, cu, mx, mx, is_causal=True))
            except Exception as exc:  # noqa: BLE001 - an older signature: recorded, not fatal
                row["torch_varlen_attn"] = f"not run: {exc}"
        row["best_tile"] = min(("default", "short"), key=row.get)
        out[name] = row
    return out


def decode_splits() -> dict:
    import torch

    from polytrace_kernels.attention import api

    d, hq, hkv = 128, 64, 8
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = {}
    for batch, length in ((1, 1500), (4, 2500), (11, 3300)):
        q = torch.randn(batch, hq, d, device="cuda", dtype=torch.bfloat16)
        kc = torch.randn(batch, length, hkv, d, device="cuda", dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        lens = torch.full((batch,), length, device="cuda", dtype=torch.int32)
        split = api.choose_split_tokens(batch, hkv, length, 64, sms)
        chosen = -(-length // split)
        times = {n: _bench(lambda n=n, q=q, kc=kc, vc=vc, lens=lens: api.decode_attention(
                     q, kc, vc, lens, num_splits=n))
                 for n in sorted({1, 8, 16, 32, 64, chosen})}
        kv_bytes = 2 * batch * length * hkv * d * 2
        best = min(times, key=times.get)
        out[f"B{batch}-L{length}"] = {"chosen_splits": chosen, "best_splits": best, "times_s": times,
                                      "chosen_hbm_tbps": kv_bytes / times[chosen] / 1e12}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="device_probe.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tuning-dir", type=Path, help="write the log-prob winner as a tuned config here")
    ap.add_argument("--json", type=Path, help="write every probe's numbers here")
    ap.add_argument("--only", action="append", choices=PROBES, help="run only this probe (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the plan and exit (no GPU needed)")
    args = ap.parse_args(argv)
    chosen = args.only or list(PROBES)
    if args.list:
        for name in chosen:
            print(f"probe {name}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("device_probe.py: no CUDA device", file=sys.stderr)
        return 3
    results, failed = {}, []
    for name in chosen:
        try:
            fn = globals()[name]
            results[name] = fn(args.tuning_dir) if name == "logprob_block" else fn()
            print(f"probe {name}: {json.dumps(results[name], default=str)}", flush=True)
        except Exception as exc:  # noqa: BLE001 - one probe's failure is named, the others still run
            traceback.print_exc()
            failed.append(name)
            print(f"probe FAILED: {name}: {type(exc).__name__}: {exc}", flush=True)
        finally:
            torch.cuda.empty_cache()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
