"""The default launch configs the static report compiles: every kernel of ``polytrace_kernels`` with
the config a bf16 launch picks on a GPU of each capability (no tuned file), specialised as Triton
specialises the launch: each spec carries the argument values of a representative launch
(``launch``), from which ``Spec`` derives what Triton's launcher derives from real arguments:
a pointer is 16-byte aligned (torch allocations and the row slices the launchers pass), an int
that is a multiple of 16 is marked divisible by 16, an int equal to 1 becomes a constant.

Representative launch (``MODEL``): model sizes are fixed (vocabulary 152064, hidden 5120: multiples
of 16, as every released model's), sizes that follow the batch (token counts, longest sequence,
split counts) take a value that is not a multiple of 16 (a batch's length is one 1 time in 16),
so the report measures the binary most launches run.

A spec's floors: ``min_ctas`` resident CTAs per SM (with the reason when it is 1), spill traffic
inside a loop (none allowed; spills outside loops are stores before / loads after them) and, for the
memory-bound kernels, the streamed element's size (``elem_bytes``) and HBM bytes moved per element
(``hbm_bytes``) from which ``static_sass.instruction_budget`` gives the instructions-per-element
budget. ``anchor`` names the public figure (``ANCHORS``) the kernel's prediction is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Public anchors the predictions are compared with: (value, unit, source). H100 SXM figures; the
# report's sm_90 limits are an H200's (same SMs and tensor cores, faster HBM).
ANCHORS = {
    "fa3-fwd-16k": (616.0, "TF/s", "FlashAttention-3 paper (arXiv 2407.08608), H100 SXM, hd128 causal fwd, 16k"),
    "fa3-fwd-1k": (423.0, "TF/s", "FlashAttention-3 paper (arXiv 2407.08608), H100 SXM, hd128 causal fwd, 1k"),
    "fa3-bwd-16k": (561.0, "TF/s", "FlashAttention-3 paper (arXiv 2407.08608), H100 SXM, hd128 bwd, 16k "
                                   "(FlashAttention-2: 322)"),
    "flashmla-decode": (0.90, "of HBM", "FlashMLA (deepseek-ai/FlashMLA README): ~90% of H800 HBM bandwidth "
                                        "in memory-bound decode"),
    "copy": (0.90, "of HBM", "a device-to-device copy (cudaMemcpy / nvbandwidth) reaches ~90% of the "
                             "datasheet HBM bandwidth on H100/H200 (assumed, not measured here)"),
    "cublas-gemm": (0.75, "of tensor peak", "cuBLAS bf16 GEMM at large sizes: ~740 TF/s of the H100 SXM's "
                                            "989 dense (assumed ~0.75 of peak, not measured here)"),
}

# Representative launch values of the ints, by argument name (overridden per spec where a name
# means something else). Qwen2.5-32B's LM head; attention heads of a GQA-4 layer (32 q, 8 kv).
MODEL = {"vocab": 152064, "hidden": 5120, "tokens": 4099, "hq": 32, "hkv": 8}


@dataclass
class Spec:
    name: str
    family: str
    fn: object
    sig: dict
    consts: dict
    launch: dict  # value of every int argument in a representative launch
    num_warps: int
    num_stages: int
    config: dict = field(default_factory=dict)
    elem_bytes: int | None = None  # streamed element size: instructions per element are read from SASS
    hbm_bytes: float | None = None  # HBM bytes per element: sets the instruction budget
    min_ctas: int = 1
    why_one_cta: str = ""
    anchor: str = ""
    aligned: list = field(init=False)

    def __post_init__(self):
        self.sig, self.consts, self.aligned = specialise(self.sig, self.consts, self.launch)


def specialise(sig: dict, consts: dict, launch: dict) -> tuple[dict, dict, list]:
    """Triton's launch-time specialisation from argument values: every pointer 16-byte aligned, an
    int divisible by 16 so marked, an int equal to 1 a constant. Every int argument needs a value."""
    ints = [n for n, t in sig.items() if t in ("i32", "i64")]
    missing = sorted(set(ints) - set(launch))
    assert not missing, f"no launch value for {missing}"
    ones = {n: 1 for n in ints if launch[n] == 1}
    sig = {n: t for n, t in sig.items() if n not in ones}
    aligned = ([n for n, t in sig.items() if t.startswith("*")]
               + [n for n in ints if n not in ones and launch[n] % 16 == 0])
    return sig, {**consts, **ones}, aligned


MATMUL_ONE_CTA = ("128x128 backward matmul tiles (d(logits), d(hidden)): 190-220 registers x 256 threads, "
                  "large-tile GEMMs run one CTA per SM as cuBLAS's do; the epilogue is a store")
LINEAR_FWD_ONE_CTA = ("128x128x64 fused forward tile, 8 warps (logprob/configs.py's sm_90 bf16 default since the "
                      "logprob merge): 220 registers x 256 threads; it moves 2/3 of the L2 bytes per flop of the "
                      "64x128 tile that ran 2 CTAs per SM (15.1 against 22.6 TB/s at the bf16 peak)")
ATTN_ONE_CTA = ("default (long-sequence) forward tile: 160-255 registers x 256 threads or 128 KB of K/V stages; "
                "short sequences use short_fwd_config at >= 2 CTAs per SM")
BWD_ONE_CTA = ("backward tiles hold their accumulators (dK and dV, or dQ) and the recomputed P in registers: "
               "130-255 registers x 256 threads")


def specs(arch: int) -> list[Spec]:
    return _logprob(arch) + _attention(arch) + _packing(arch)


def _logprob(arch: int) -> list[Spec]:
    import torch

    from polytrace_kernels.logprob import configs as C
    from polytrace_kernels.logprob import kernel as K
    from polytrace_kernels.logprob import kernel_bwd as KB

    cap = (arch // 10, arch % 10)
    V, H, T = MODEL["vocab"], MODEL["hidden"], MODEL["tokens"]
    out = []
    fwd = C.default_logits_fwd_config(torch.bfloat16, cap)
    bwd = C.default_logits_bwd_config(torch.bfloat16, cap)
    fwd_sig = {"logits_ptr": "*bf16", "tokens_ptr": "*i64", "logprob_ptr": "*fp32", "entropy_ptr": "*fp32",
               "max_ptr": "*fp32", "logsum_ptr": "*fp32", "stride_row": "i32", "vocab_size": "i32",
               "temperature": "fp32", "softcap": "fp32", "ignore_index": "i32"}
    rows = {"stride_row": V, "vocab_size": V, "ignore_index": -100, "stride_grad_row": V}
    for ent in (True, False):
        out.append(Spec(f"logprob-fwd{'-entropy' if ent else ''}", "logprob", K.token_logprobs_fwd_kernel, fwd_sig,
                        {"SCALE": True, "EXACT_DIV": False, "SOFTCAP": False, "RETURN_ENTROPY": ent,
                         "BLOCK_V": fwd["BLOCK_V"]},
                        rows, fwd["num_warps"], fwd["num_stages"], fwd, elem_bytes=2, hbm_bytes=2, min_ctas=2,
                        anchor="copy"))
    bwd_sig = {"logits_ptr": "*bf16", "tokens_ptr": "*i64", "max_ptr": "*fp32", "logsum_ptr": "*fp32",
               "entropy_ptr": "*fp32", "grad_lp_ptr": "*fp32", "grad_ent_ptr": "*fp32", "grad_logits_ptr": "*bf16",
               "stride_row": "i32", "stride_grad_row": "i32", "vocab_size": "i32", "temperature": "fp32",
               "softcap": "fp32", "ignore_index": "i32"}
    out.append(Spec("logprob-bwd", "logprob", KB.token_logprobs_bwd_kernel, bwd_sig,
                    {"SCALE": True, "EXACT_DIV": False, "SOFTCAP": False, "HAS_GRAD_LP": True, "HAS_GRAD_ENT": True,
                     "BLOCK_V": bwd["BLOCK_V"], "ROUND_BF16": False},
                    rows, bwd["num_warps"], bwd["num_stages"], bwd, elem_bytes=2, hbm_bytes=4, min_ctas=2,
                    anchor="copy"))
    for dt, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        lf, lb = C.default_linear_fwd_config(tdt, cap), C.default_linear_bwd_config(tdt, cap)
        prec = C.dot_precision(tdt)
        lin_sig = {"hidden_ptr": f"*{dt}", "weight_ptr": f"*{dt}", "tokens_ptr": "*i64", "order_ptr": "*i64",
                   "n_active_ptr": "*i32", "part_ptr": "*fp32",
                   "n_rows": "i32", "vocab_size": "i32", "hidden_size": "i32", "stride_h": "i32", "stride_w": "i32",
                   "inv_temperature": "fp32", "softcap": "fp32", "vblocks_per_split": "i32"}
        vblocks = -(-(-(-V // lf["BLOCK_V"])) // lf["NSPLIT"])  # noqa: B002 - two ceiling divisions, not "--"
        big = lf["BLOCK_T"] * lf["BLOCK_V"] >= 128 * 128  # the 128x128 tile: 1 CTA per SM by choice
        out.append(Spec(f"linear-fwd-{dt}", "logprob", K.linear_logprobs_fwd_kernel, lin_sig,
                        {"NSPLIT": lf["NSPLIT"], "SCALE": True, "SOFTCAP": False, "RETURN_ENTROPY": True,
                         "EVEN_K": True, "EVEN_V": V % lf["BLOCK_V"] == 0, "BLOCK_T": lf["BLOCK_T"],
                         "BLOCK_V": lf["BLOCK_V"], "BLOCK_K": lf["BLOCK_K"], "DOT_PRECISION": prec},
                        {"n_rows": T, "vocab_size": V, "hidden_size": H, "stride_h": H, "stride_w": H,
                         "vblocks_per_split": vblocks}, lf["num_warps"], lf["num_stages"], lf,
                        min_ctas=1 if big else 2, why_one_cta=LINEAR_FWD_ONE_CTA if big else "", anchor="cublas-gemm"))
        # the backward's vocabulary chunk (api.py: 512 MiB of d(logits) over T rows, a multiple of
        # BLOCK_V): v_start, chunk_cols and d(logits)' row stride are multiples of 16
        elem = 2 if dt == "bf16" else 4
        chunk = min(V, max(lb["BLOCK_V"], (512 << 20) // (T * elem) // lb["BLOCK_V"] * lb["BLOCK_V"]))
        out.append(Spec(f"linear-dlogits-{dt}", "logprob", KB.linear_dlogits_kernel,
                        {"hidden_ptr": f"*{dt}", "weight_ptr": f"*{dt}", "tokens_ptr": "*i64", "max_ptr": "*fp32",
                         "logsum_ptr": "*fp32", "entropy_ptr": "*fp32", "grad_lp_ptr": "*fp32",
                         "grad_ent_ptr": "*fp32", "dlogits_ptr": f"*{dt}", "n_rows": "i32", "vocab_size": "i32",
                         "hidden_size": "i32", "v_start": "i32", "chunk_cols": "i32", "stride_h": "i32",
                         "stride_w": "i32", "stride_d": "i32", "inv_temperature": "fp32",
                         "softcap": "fp32"},
                        {"SCALE": True, "SOFTCAP": False, "HAS_GRAD_ENT": True, "EVEN_K": True,
                         "BLOCK_T": lb["BLOCK_T"], "BLOCK_V": lb["BLOCK_V"], "BLOCK_K": lb["BLOCK_K"],
                         "GROUP_T": lb["GROUP"], "DOT_PRECISION": prec},
                        {"n_rows": T, "vocab_size": V, "hidden_size": H, "v_start": chunk, "chunk_cols": chunk,
                         "stride_h": H, "stride_w": H, "stride_d": chunk},
                        lb["num_warps"], lb["num_stages"], lb, why_one_cta=MATMUL_ONE_CTA, anchor="cublas-gemm"))
        out.append(Spec(f"linear-accumulate-{dt}", "logprob", KB.matmul_accumulate_kernel,
                        {"a_ptr": f"*{dt}", "b_ptr": f"*{dt}", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
                         "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"},
                        {"stride_ak": 1, "stride_bn": 1, "BLOCK_M": lb["BLOCK_T"], "BLOCK_N": lb["BLOCK_V"],
                         "BLOCK_K": lb["BLOCK_K"], "GROUP_M": lb["GROUP"], "DOT_PRECISION": prec},
                        {"M": T, "N": H, "K": chunk, "stride_am": chunk, "stride_bk": H, "stride_cm": H},
                        lb["num_warps"], lb["num_stages"], lb, why_one_cta=MATMUL_ONE_CTA, anchor="cublas-gemm"))
    lf = C.default_linear_fwd_config(torch.bfloat16, cap)
    out.append(Spec("linear-combine", "logprob", K.linear_logprobs_combine_kernel,
                    {"part_ptr": "*fp32", "tokens_ptr": "*i64", "logprob_ptr": "*fp32", "entropy_ptr": "*fp32",
                     "max_ptr": "*fp32", "logsum_ptr": "*fp32", "n_rows": "i32", "vocab_size": "i32",
                     "ignore_index": "i32"},
                    {"NSPLIT": lf["NSPLIT"], "RETURN_ENTROPY": True, "BLOCK_T": 128},
                    {"n_rows": T, "vocab_size": V, "ignore_index": -100}, 4, 3, {"BLOCK_T": 128, "num_warps": 4}))
    return out


def _attention(arch: int) -> list[Spec]:
    import torch

    from polytrace_kernels.attention import api as A
    from polytrace_kernels.attention import configs as AC
    from polytrace_kernels.attention import kernel as AK

    cap = (arch // 10, arch % 10)
    p, i32 = "*bf16", "i32"
    T, hq, hkv = MODEL["tokens"], MODEL["hq"], MODEL["hkv"]
    qkv = ["stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh"]
    out = []
    for d in (64, 128, 256):
        bd = A._block_d(d)
        # packed [T, H, D] tensors; LSE / DELTA [H, T]: their head stride is the batch's token count
        strides = {"stride_qt": hq * d, "stride_qh": d, "stride_kt": hkv * d, "stride_kh": d, "stride_vt": hkv * d,
                   "stride_vh": d, "stride_ot": hq * d, "stride_oh": d, "stride_dot": hq * d, "stride_doh": d,
                   "stride_lh": T, "stride_dqt": hq * d, "stride_dqh": d, "stride_dkt": hkv * d, "stride_dkh": d,
                   "stride_dvt": hkv * d, "stride_dvh": d, "n_slots": 2 * 33 + 1, "n_heads_q": hq, "n_heads_kv": hkv,
                   "group": hq // hkv}
        fwd_cfgs = [("", A.default_fwd_config(d, torch.bfloat16, capability=cap))]
        short = AC.short_fwd_config(d, torch.bfloat16, capability=cap)
        if short != fwd_cfgs[0][1]:
            fwd_cfgs.append(("-short", short))
        for tag, cfg in fwd_cfgs:
            for causal in (True, False):
                sig = {"Q": p, "K": p, "V": p, "O": p, "LSE": "*fp32", "cu_seqlens_q": "*i32",
                       "cu_seqlens_k": "*i32", "work_seq": "*i32", "work_block": "*i32", "qk_scale_log2": "fp32",
                       "n_slots": i32, "n_heads_q": i32, "group": i32}
                sig.update({s: i32 for s in qkv + ["stride_ot", "stride_oh", "stride_lh"]})
                short_tile = tag == "-short"
                out.append(Spec(f"attn-fwd{tag}-{'causal' if causal else 'full'}-d{d}", "attention",
                                AK.varlen_fwd_kernel, sig,
                                {"HEAD_DIM": d, "BLOCK_D": bd, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
                                 "CAUSAL": causal, "HEADS_INNER": True, "EVEN_D": True},
                                strides, cfg["num_warps"], cfg["num_stages"], cfg, min_ctas=2 if short_tile else 1,
                                why_one_cta="" if short_tile else ATTN_ONE_CTA,
                                anchor="fa3-fwd-1k" if short_tile else "fa3-fwd-16k"))
        bwd = A.default_bwd_config(d, torch.bfloat16, capability=cap)
        for causal in (True, False):
            ctag = f"{'causal' if causal else 'full'}-d{d}"
            common = {"Q": p, "K": p, "V": p, "DO": p, "LSE": "*fp32", "DELTA": "*fp32", "cu_seqlens_q": "*i32",
                      "cu_seqlens_k": "*i32", "work_seq": "*i32", "work_block": "*i32", "stride_dot": i32,
                      "stride_doh": i32, "stride_lh": i32, "softmax_scale": "fp32", "qk_scale_log2": "fp32",
                      "group": i32}
            common.update({s: i32 for s in qkv})
            out.append(Spec(f"attn-dkdv-{ctag}", "attention", AK.varlen_bwd_dkdv_kernel,
                            dict(common, DK=p, DV=p, stride_dkt=i32, stride_dkh=i32, stride_dvt=i32, stride_dvh=i32,
                                 n_heads_kv=i32),
                            {"HEAD_DIM": d, "BLOCK_D": bd, "BLOCK_M": bwd["DKDV_BLOCK_M"],
                             "BLOCK_N": bwd["DKDV_BLOCK_N"], "CAUSAL": causal, "EVEN_D": True},
                            strides, bwd["DKDV_WARPS"], bwd["DKDV_STAGES"],
                            {k: v for k, v in bwd.items() if k.startswith("DKDV")}, why_one_cta=BWD_ONE_CTA,
                            anchor="fa3-bwd-16k"))
            out.append(Spec(f"attn-dq-{ctag}", "attention", AK.varlen_bwd_dq_kernel,
                            dict(common, DQ=p, stride_dqt=i32, stride_dqh=i32, n_heads_q=i32),
                            {"HEAD_DIM": d, "BLOCK_D": bd,
                             "BLOCK_M": A.default_fwd_config(d, torch.bfloat16, capability=cap)["BLOCK_M"],
                             "BLOCK_N": bwd["DQ_BLOCK_N"], "CAUSAL": causal, "EVEN_D": True},
                            strides, bwd["DQ_WARPS"], bwd["DQ_STAGES"],
                            {k: v for k, v in bwd.items() if k.startswith("DQ")}, why_one_cta=BWD_ONE_CTA,
                            anchor="fa3-bwd-16k"))
    out += _attention_ext(arch, strides)
    out += _decode(arch)
    return out


def _attention_ext(arch: int, strides: dict) -> list[Spec]:
    """The softcap + sliding-window kernels (``kernel_ext.py``) at D=128, causal, with the default
    tiles: a Gemma-2-like launch (softcap 50, window 4096 keys to the left; right 0 when causal)."""
    import torch

    from polytrace_kernels.attention import api as A
    from polytrace_kernels.attention import kernel_ext as KE

    cap = (arch // 10, arch % 10)
    p, i32, f32, d = "*bf16", "i32", "fp32", 128
    ext_sig = {"softcap_in": f32, "softcap_out": f32, "win_left": i32, "win_right": i32}
    launch = dict(strides, win_left=4096, win_right=0)
    ext_c = {"HEAD_DIM": d, "BLOCK_D": A._block_d(d), "CAUSAL": True, "EVEN_D": True, "SOFTCAP": True, "WINDOW": True}
    qkv = {s: i32 for s in ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh")}
    fwd = A.default_fwd_config(d, torch.bfloat16, capability=cap)
    bwd = A.default_bwd_config(d, torch.bfloat16, capability=cap, ext=True)
    sig = dict({"Q": p, "K": p, "V": p, "O": p, "LSE": "*fp32", "cu_seqlens_q": "*i32", "cu_seqlens_k": "*i32",
                "work_seq": "*i32", "work_block": "*i32"}, **qkv, stride_ot=i32, stride_oh=i32, stride_lh=i32,
               qk_scale_log2=f32, n_slots=i32, n_heads_q=i32, group=i32, **ext_sig)
    out = [Spec("attn-fwd-ext-causal-d128", "attention", KE.varlen_fwd_ext_kernel, sig,
                dict(ext_c, BLOCK_M=fwd["BLOCK_M"], BLOCK_N=fwd["BLOCK_N"], HEADS_INNER=True), launch,
                fwd["num_warps"], fwd["num_stages"], fwd, why_one_cta=ATTN_ONE_CTA, anchor="fa3-fwd-16k")]
    common = dict({"Q": p, "K": p, "V": p, "DO": p, "LSE": "*fp32", "DELTA": "*fp32", "cu_seqlens_q": "*i32",
                   "cu_seqlens_k": "*i32", "work_seq": "*i32", "work_block": "*i32"}, **qkv, stride_dot=i32,
                  stride_doh=i32)
    tail = {"stride_lh": i32, "softmax_scale": f32, "qk_scale_log2": f32}
    out.append(Spec("attn-dkdv-ext-causal-d128", "attention", KE.varlen_bwd_dkdv_ext_kernel,
                    dict(common, DK=p, DV=p, stride_dkt=i32, stride_dkh=i32, stride_dvt=i32, stride_dvh=i32, **tail,
                         n_heads_kv=i32, group=i32, **ext_sig),
                    dict(ext_c, BLOCK_M=bwd["DKDV_BLOCK_M"], BLOCK_N=bwd["DKDV_BLOCK_N"]), launch,
                    bwd["DKDV_WARPS"], bwd["DKDV_STAGES"], {k: v for k, v in bwd.items() if k.startswith("DKDV")},
                    why_one_cta=BWD_ONE_CTA, anchor="fa3-bwd-16k"))
    out.append(Spec("attn-dq-ext-causal-d128", "attention", KE.varlen_bwd_dq_ext_kernel,
                    dict(common, DQ=p, stride_dqt=i32, stride_dqh=i32, **tail, n_heads_q=i32, group=i32, **ext_sig),
                    dict(ext_c, BLOCK_M=fwd["BLOCK_M"], BLOCK_N=bwd["DQ_BLOCK_N"]), launch,
                    bwd["DQ_WARPS"], bwd["DQ_STAGES"], {k: v for k, v in bwd.items() if k.startswith("DQ")},
                    why_one_cta=BWD_ONE_CTA, anchor="fa3-bwd-16k"))
    return out


def _decode(arch: int) -> list[Spec]:
    from polytrace_kernels.attention import api as A
    from polytrace_kernels.attention import kernel as AK
    from polytrace_kernels.attention import kernel_decode as KD

    cap = (arch // 10, arch % 10)
    p, i32 = "*bf16", "i32"
    d, bd, hq, hkv = 128, 128, 64, 8  # a GQA-8 model's decode (Llama-3-70B's heads), one query token
    dec = A.default_decode_config(d, capability=cap)
    max_len, n_splits = 16000, 7  # the cache's longest row and the splits of a long-tailed batch
    strides = ["stride_qb", "stride_qh", "stride_kb", "stride_kt", "stride_kh", "stride_vb", "stride_vt", "stride_vh",
               "stride_ob", "stride_oh", "stride_pb", "stride_ph", "stride_ps", "stride_lb", "stride_lh", "stride_btb"]
    out = []
    # contiguous [B, L, Hkv, D]; paged [pages, page, Hkv, D] (vLLM's 16, ours 256); then the
    # softcap + window kernel (kernel_decode.py's ext: Gemma 2's softcap 50, 4096 keys to the left)
    # on 16-token pages, one query token and 4 (MULTI: 4 tokens x 8 heads = 32 rows, api.py's BLOCK_G)
    for page, ext_sq in ((0, 0), (16, 0), (256, 0), (16, 1), (16, 4)):
        rows = page or max_len
        launch = {"stride_qb": hq * d, "stride_qh": d, "stride_kb": rows * hkv * d, "stride_kt": hkv * d,
                  "stride_kh": d, "stride_ob": hq * d, "stride_oh": d, "stride_pb": hq * n_splits * d,
                  "stride_ph": n_splits * d, "stride_ps": d, "stride_lb": hq * n_splits, "stride_lh": n_splits,
                  "stride_btb": -(-max_len // page) if page else 0, "n_heads_kv": hkv, "group": hq // hkv,
                  "split_tokens": 1024, "max_len": max_len + 3}
        launch.update({"stride_vb": launch["stride_kb"], "stride_vt": launch["stride_kt"], "stride_vh": d})
        sig = {"Q": p, "K": p, "V": p, "SEQLENS": "*i32", "BLOCK_TABLE": "*i32", "O": p, "O_PART": "*fp32",
               "LSE_PART": "*fp32", "qk_scale_log2": "fp32", "n_heads_kv": i32, "group": i32, "split_tokens": i32,
               "max_len": i32}
        sig.update({s: i32 for s in strides})
        name = f"decode-split-{f'paged{page}' if page else 'contig'}-d128-g8"
        consts = {"HEAD_DIM": d, "BLOCK_D": bd, "BLOCK_G": 16, "BLOCK_N": dec["BLOCK_N"], "PAGE_SIZE": page or 1,
                  "PAGED": bool(page), "SINGLE_SPLIT": False, "EVEN_D": True,
                  "CHUNK_PAGES": A.decode_chunk_pages(page, dec["BLOCK_N"]) if page else 1}
        fn = AK.decode_split_kernel
        if ext_sq:
            fn = KD.decode_split_ext_kernel
            name = name.replace("split-", "split-ext-" if ext_sq == 1 else f"split-ext-multi{ext_sq}-")
            sig.update(softcap_in="fp32", softcap_out="fp32", win_left=i32, win_right=i32, seqlen_q=i32)
            launch.update(win_left=4096, win_right=0, seqlen_q=ext_sq)
            consts.update(SOFTCAP=True, WINDOW=True, MULTI=ext_sq > 1, BLOCK_G=16 if ext_sq == 1 else 32)
        out.append(Spec(name, "attention", fn, sig, consts, launch, dec["num_warps"], dec["num_stages"], dec,
                        elem_bytes=2, hbm_bytes=2, min_ctas=2, anchor="flashmla-decode"))
    out.append(Spec("decode-combine-d128", "attention", AK.decode_combine_kernel,
                    {"O_PART": "*fp32", "LSE_PART": "*fp32", "SEQLENS": "*i32", "O": p, "LSE": "*fp32",
                     "stride_pb": i32, "stride_ph": i32, "stride_ps": i32, "stride_lb": i32, "stride_lh": i32,
                     "stride_ob": i32, "stride_oh": i32, "stride_fb": i32, "n_heads_q": i32, "split_tokens": i32,
                     "max_len": i32},
                    {"HEAD_DIM": d, "BLOCK_D": bd, "BLOCK_S": 16, "N_SPLITS_POW2": 32},
                    {"stride_pb": hq * n_splits * d, "stride_ph": n_splits * d, "stride_ps": d,
                     "stride_lb": hq * n_splits, "stride_lh": n_splits, "stride_ob": hq * d, "stride_oh": d,
                     "stride_fb": hq, "n_heads_q": hq, "split_tokens": 1024, "max_len": max_len + 3},
                    4, 3, {"BLOCK_S": 16, "num_warps": 4}, min_ctas=2))
    return out


def _packing(arch: int) -> list[Spec]:
    import torch

    from polytrace_kernels.packing import api as PA
    from polytrace_kernels.packing import kernel as PK

    out = []
    for feat, dt, tdt, esize in ((4096, "bf16", torch.bfloat16, 2), (1, "fp32", torch.float32, 4)):
        cfg = PA.default_config(feat, tdt, capability=(arch // 10, arch % 10))
        consts = {"BLOCK_T": cfg["BLOCK_T"], "BLOCK_F": cfg["BLOCK_F"]}
        sig = {"padded_ptr": f"*{dt}", "packed_ptr": f"*{dt}", "cu_ptr": "*i32", "T": "i32", "S": "i32", "F": "i32",
               "stride_pb": "i32", "stride_ps": "i32"}
        S = 8192  # the padded length: the trainer pads to its max length, a multiple of 16
        launch = {"T": MODEL["tokens"], "S": S, "F": feat, "stride_pb": S * feat, "stride_ps": feat}
        for name, fn in (("pack", PK._pack_kernel), ("unpack", PK._unpack_kernel)):
            out.append(Spec(f"{name}-F{feat}-{dt}", "packing", fn, dict(sig), consts, launch, cfg["num_warps"], 1, cfg,
                            elem_bytes=esize, hbm_bytes=2 * esize, min_ctas=2, anchor="copy"))
    return out
