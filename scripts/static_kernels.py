"""The default launch configs the static report compiles: every kernel of ``polytrace_kernels`` with
the config a bf16 launch picks on a GPU of each capability (no tuned file), in the argument types
and 16-divisibility the launchers specialise on, plus the stated floors the report is held to.

A spec's floors: ``max_spill`` bytes per thread (0 for every default), ``min_ctas`` resident CTAs
per SM (with the reason when it is 1) and, for the memory-bound kernels, the streamed element's
size (``elem_bytes``) and HBM bytes moved per element (``hbm_bytes``) from which
``static_sass.instruction_budget`` gives the instructions-per-element budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Spec:
    name: str
    family: str
    fn: object
    sig: dict
    consts: dict
    aligned: list
    num_warps: int
    num_stages: int
    config: dict = field(default_factory=dict)
    elem_bytes: int | None = None  # streamed element size: instructions per element are read from SASS
    hbm_bytes: float | None = None  # HBM bytes per element: sets the instruction budget
    max_spill: int = 0
    min_ctas: int = 1
    why_one_cta: str = ""


MATMUL_ONE_CTA = ("128x128 backward matmul tiles (d(logits), d(hidden)): 190-220 registers x 256 threads, "
                  "large-tile GEMMs run one CTA per SM as cuBLAS's do; the epilogue is a store")
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

    cap = (arch // 10, arch % 10)
    out = []
    fwd = C.default_logits_fwd_config(torch.bfloat16, cap)
    bwd = C.default_logits_bwd_config(torch.bfloat16, cap)
    fwd_sig = {"logits_ptr": "*bf16", "tokens_ptr": "*i64", "logprob_ptr": "*fp32", "entropy_ptr": "*fp32",
               "max_ptr": "*fp32", "logsum_ptr": "*fp32", "stride_row": "i32", "vocab_size": "i32",
               "temperature": "fp32", "ignore_index": "i32"}
    for ent in (True, False):
        out.append(Spec(f"logprob-fwd{'-entropy' if ent else ''}", "logprob", K.token_logprobs_fwd_kernel, fwd_sig,
                        {"SCALE": True, "EXACT_DIV": False, "RETURN_ENTROPY": ent, "BLOCK_V": fwd["BLOCK_V"]},
                        ["logits_ptr", "stride_row", "vocab_size"], fwd["num_warps"], fwd["num_stages"], fwd,
                        elem_bytes=2, hbm_bytes=2, min_ctas=2))
    bwd_sig = {"logits_ptr": "*bf16", "tokens_ptr": "*i64", "max_ptr": "*fp32", "logsum_ptr": "*fp32",
               "entropy_ptr": "*fp32", "grad_lp_ptr": "*fp32", "grad_ent_ptr": "*fp32", "grad_logits_ptr": "*bf16",
               "stride_row": "i32", "stride_grad_row": "i32", "vocab_size": "i32", "temperature": "fp32",
               "ignore_index": "i32"}
    out.append(Spec("logprob-bwd", "logprob", K.token_logprobs_bwd_kernel, bwd_sig,
                    {"SCALE": True, "EXACT_DIV": False, "HAS_GRAD_LP": True, "HAS_GRAD_ENT": True,
                     "BLOCK_V": bwd["BLOCK_V"], "ROUND_BF16": False},
                    ["logits_ptr", "grad_logits_ptr", "stride_row", "stride_grad_row", "vocab_size"],
                    bwd["num_warps"], bwd["num_stages"], bwd, elem_bytes=2, hbm_bytes=4, min_ctas=2))
    for dt, tdt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        lf, lb = C.default_linear_fwd_config(tdt, cap), C.default_linear_bwd_config(tdt, cap)
        prec = C.dot_precision(tdt)
        lin_sig = {"hidden_ptr": f"*{dt}", "weight_ptr": f"*{dt}", "tokens_ptr": "*i64", "part_ptr": "*fp32",
                   "n_rows": "i32", "vocab_size": "i32", "hidden_size": "i32", "stride_h": "i32", "stride_w": "i32",
                   "inv_temperature": "fp32", "vblocks_per_split": "i32"}
        out.append(Spec(f"linear-fwd-{dt}", "logprob", K.linear_logprobs_fwd_kernel, lin_sig,
                        {"NSPLIT": lf["NSPLIT"], "SCALE": True, "RETURN_ENTROPY": True, "EVEN_K": True,
                         "BLOCK_T": lf["BLOCK_T"], "BLOCK_V": lf["BLOCK_V"], "BLOCK_K": lf["BLOCK_K"],
                         "DOT_PRECISION": prec},
                        ["hidden_ptr", "weight_ptr", "hidden_size", "stride_h", "stride_w"], lf["num_warps"],
                        lf["num_stages"], lf, min_ctas=2))
        out.append(Spec(f"linear-dlogits-{dt}", "logprob", K.linear_dlogits_kernel,
                        {"hidden_ptr": f"*{dt}", "weight_ptr": f"*{dt}", "tokens_ptr": "*i64", "max_ptr": "*fp32",
                         "logsum_ptr": "*fp32", "entropy_ptr": "*fp32", "grad_lp_ptr": "*fp32",
                         "grad_ent_ptr": "*fp32", "dlogits_ptr": f"*{dt}", "n_rows": "i32", "vocab_size": "i32",
                         "hidden_size": "i32", "v_start": "i32", "chunk_cols": "i32", "stride_h": "i32",
                         "stride_w": "i32", "stride_d": "i32", "inv_temperature": "fp32"},
                        {"SCALE": True, "HAS_GRAD_ENT": True, "EVEN_K": True, "BLOCK_T": lb["BLOCK_T"],
                         "BLOCK_V": lb["BLOCK_V"], "BLOCK_K": lb["BLOCK_K"], "GROUP_T": lb["GROUP"],
                         "DOT_PRECISION": prec},
                        ["hidden_ptr", "weight_ptr", "dlogits_ptr", "hidden_size", "stride_h", "stride_w", "stride_d"],
                        lb["num_warps"], lb["num_stages"], lb, why_one_cta=MATMUL_ONE_CTA))
        out.append(Spec(f"linear-accumulate-{dt}", "logprob", K.matmul_accumulate_kernel,
                        {"a_ptr": f"*{dt}", "b_ptr": f"*{dt}", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
                         "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"},
                        {"stride_ak": 1, "stride_bn": 1, "BLOCK_M": lb["BLOCK_T"], "BLOCK_N": lb["BLOCK_V"],
                         "BLOCK_K": lb["BLOCK_K"], "GROUP_M": lb["GROUP"], "DOT_PRECISION": prec},
                        ["a_ptr", "b_ptr", "c_ptr", "N", "stride_am", "stride_bk", "stride_cm"], lb["num_warps"],
                        lb["num_stages"], lb, why_one_cta=MATMUL_ONE_CTA))
    lf = C.default_linear_fwd_config(torch.bfloat16, cap)
    out.append(Spec("linear-combine", "logprob", K.linear_logprobs_combine_kernel,
                    {"part_ptr": "*fp32", "tokens_ptr": "*i64", "logprob_ptr": "*fp32", "entropy_ptr": "*fp32",
                     "max_ptr": "*fp32", "logsum_ptr": "*fp32", "n_rows": "i32", "vocab_size": "i32",
                     "ignore_index": "i32"},
                    {"NSPLIT": lf["NSPLIT"], "RETURN_ENTROPY": True, "BLOCK_T": 128}, [], 4, 3,
                    {"BLOCK_T": 128, "num_warps": 4}))
    return out


def _attention(arch: int) -> list[Spec]:
    import torch

    from polytrace_kernels.attention import api as A
    from polytrace_kernels.attention import configs as AC
    from polytrace_kernels.attention import kernel as AK

    cap = (arch // 10, arch % 10)
    p, i32 = "*bf16", "i32"
    qkv = ["stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh"]
    out = []
    for d in (64, 128, 256):
        bd = A._block_d(d)
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
                                ["Q", "K", "V", "O", "LSE"] + qkv + ["stride_ot", "stride_oh"], cfg["num_warps"],
                                cfg["num_stages"], cfg, min_ctas=2 if short_tile else 1,
                                why_one_cta="" if short_tile else ATTN_ONE_CTA))
        bwd = A.default_bwd_config(d, torch.bfloat16, capability=cap)
        for causal in (True, False):
            ctag = f"{'causal' if causal else 'full'}-d{d}"
            common = {"Q": p, "K": p, "V": p, "DO": p, "LSE": "*fp32", "DELTA": "*fp32", "cu_seqlens_q": "*i32",
                      "cu_seqlens_k": "*i32", "work_seq": "*i32", "work_block": "*i32", "stride_dot": i32,
                      "stride_doh": i32, "stride_lh": i32, "softmax_scale": "fp32", "qk_scale_log2": "fp32",
                      "group": i32}
            common.update({s: i32 for s in qkv})
            aligned = ["Q", "K", "V", "DO", "LSE", "DELTA", "stride_dot", "stride_doh"] + qkv
            out.append(Spec(f"attn-dkdv-{ctag}", "attention", AK.varlen_bwd_dkdv_kernel,
                            dict(common, DK=p, DV=p, stride_dkt=i32, stride_dkh=i32, stride_dvt=i32, stride_dvh=i32,
                                 n_heads_kv=i32),
                            {"HEAD_DIM": d, "BLOCK_D": bd, "BLOCK_M": bwd["DKDV_BLOCK_M"], "BLOCK_N": bwd["DKDV_BLOCK_N"],
                             "CAUSAL": causal, "EVEN_D": True},
                            aligned + ["DK", "DV", "stride_dkt", "stride_dkh", "stride_dvt", "stride_dvh"],
                            bwd["DKDV_WARPS"], bwd["DKDV_STAGES"],
                            {k: v for k, v in bwd.items() if k.startswith("DKDV")}, why_one_cta=BWD_ONE_CTA))
            out.append(Spec(f"attn-dq-{ctag}", "attention", AK.varlen_bwd_dq_kernel,
                            dict(common, DQ=p, stride_dqt=i32, stride_dqh=i32, n_heads_q=i32),
                            {"HEAD_DIM": d, "BLOCK_D": bd,
                             "BLOCK_M": A.default_fwd_config(d, torch.bfloat16, capability=cap)["BLOCK_M"],
                             "BLOCK_N": bwd["DQ_BLOCK_N"], "CAUSAL": causal, "EVEN_D": True},
                            aligned + ["DQ", "stride_dqt", "stride_dqh"], bwd["DQ_WARPS"], bwd["DQ_STAGES"],
                            {k: v for k, v in bwd.items() if k.startswith("DQ")}, why_one_cta=BWD_ONE_CTA))
    d, bd = 128, 128
    dec = A.default_decode_config(d, capability=cap)
    strides = ["stride_qb", "stride_qh", "stride_kb", "stride_kt", "stride_kh", "stride_vb", "stride_vt", "stride_vh",
               "stride_ob", "stride_oh", "stride_pb", "stride_ph", "stride_ps", "stride_lb", "stride_lh", "stride_btb"]
    for paged in (False, True):
        sig = {"Q": p, "K": p, "V": p, "SEQLENS": "*i32", "BLOCK_TABLE": "*i32", "O": p, "O_PART": "*fp32",
               "LSE_PART": "*fp32", "qk_scale_log2": "fp32", "n_heads_kv": i32, "group": i32, "split_tokens": i32,
               "max_len": i32}
        sig.update({s: i32 for s in strides})
        out.append(Spec(f"decode-split-{'paged' if paged else 'contig'}-d128-g8", "attention", AK.decode_split_kernel,
                        sig, {"HEAD_DIM": d, "BLOCK_D": bd, "BLOCK_G": 16, "BLOCK_N": dec["BLOCK_N"],
                              "PAGE_SIZE": 16 if paged else 1, "PAGED": paged, "SINGLE_SPLIT": False, "EVEN_D": True},
                        ["Q", "K", "V", "O", "O_PART", "stride_qb", "stride_qh", "stride_kb", "stride_kt", "stride_kh",
                         "stride_vb", "stride_vt", "stride_vh", "stride_ob", "stride_oh", "stride_pb", "stride_ph"],
                        dec["num_warps"], dec["num_stages"], dec, elem_bytes=2, hbm_bytes=2, min_ctas=2))
    out.append(Spec("decode-combine-d128", "attention", AK.decode_combine_kernel,
                    {"O_PART": "*fp32", "LSE_PART": "*fp32", "SEQLENS": "*i32", "O": p, "LSE": "*fp32",
                     "stride_pb": i32, "stride_ph": i32, "stride_ps": i32, "stride_lb": i32, "stride_lh": i32,
                     "stride_ob": i32, "stride_oh": i32, "stride_fb": i32, "n_heads_q": i32, "split_tokens": i32,
                     "max_len": i32},
                    {"HEAD_DIM": d, "BLOCK_D": bd, "BLOCK_S": 16, "N_SPLITS_POW2": 32},
                    ["O_PART", "O", "stride_pb", "stride_ph", "stride_ps", "stride_ob", "stride_oh"], 4, 3,
                    {"BLOCK_S": 16, "num_warps": 4}, min_ctas=2))
    return out


def _packing(arch: int) -> list[Spec]:
    import torch

    from polytrace_kernels.packing import api as PA
    from polytrace_kernels.packing import kernel as PK

    out = []
    for feat, dt, tdt, esize in ((4096, "bf16", torch.bfloat16, 2), (1, "fp32", torch.float32, 4)):
        cfg = PA.default_config(feat, tdt, capability=(arch // 10, arch % 10))
        consts = {"BLOCK_T": cfg["BLOCK_T"], "BLOCK_F": cfg["BLOCK_F"]}
        aligned_f = ["S", "F", "stride_pb", "stride_ps"] if feat % 16 == 0 else ["S"]
        sig = {"padded_ptr": f"*{dt}", "packed_ptr": f"*{dt}", "cu_ptr": "*i32", "T": "i32", "S": "i32", "F": "i32",
               "stride_pb": "i32", "stride_ps": "i32"}
        if feat == 1:  # F = 1 and stride 1 are specialised to constants at launch
            sig.pop("F"), sig.pop("stride_ps")
            consts.update({"F": 1, "stride_ps": 1})
        for name, fn in (("pack", PK._pack_kernel), ("unpack", PK._unpack_kernel)):
            out.append(Spec(f"{name}-F{feat}-{dt}", "packing", fn, sig, consts,
                            ["padded_ptr", "packed_ptr"] + aligned_f, cfg["num_warps"], 1, cfg,
                            elem_bytes=esize, hbm_bytes=2 * esize, min_ctas=2))
    return out
