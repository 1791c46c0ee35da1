"""Compile the attention and packing kernels for sm_90 and sm_80 ahead of time, without a GPU.

Same approach as ``tests/kernels/test_logprob_compile.py``: the CPU tests run the kernels in the Triton
interpreter, which accepts code the compiler rejects (and the reverse), so every ``@triton.jit``
kernel of ``kernels/attention/kernel.py`` (and the softcap + window kernels of ``kernel_ext.py``, D=128
causal) and ``kernels/packing/kernel.py`` is lowered to PTX and
cubin with ``triton.compile`` (ptxas ships in the triton wheel), with the configs the launchers in
``api.py`` choose on a GPU for D=128 bf16 (the backward also at D=64), causal and not, each arch
with the tiles picked for its compute capability (``default_bwd_config(capability=...)``: the
dK/dV tile differs on sm_80). This catches GPU-only compile errors (e.g. a construct one triton version lowers
and another rejects) on a CPU-only CI machine. Cheap properties checked, robust across triton
3.6-3.9:

- every matmul kernel (forward, dK/dV, dQ, decode split) uses tensor-core instructions
  (``mma.sync`` or Hopper ``wgmma``), and the forward uses ``wgmma`` on sm_90;
- no spill load or store (``LDL`` / ``STL`` in the SASS) inside any loop of the cubin Triton
  itself builds (its ptxas options, e.g. triton 3.9's ``--regAllocOptLevel=2``, change the
  allocation); a few bytes stored before the loops and reloaded after them cost once per program
  (the D=128 dK/dV wgmma tile: 16-96 B); ``results/static`` has the figures;
- the aligned pack/unpack kernels move bf16 rows with 16-byte vector loads.

Runs in a subprocess because ``tests/conftest.py`` switches this process to the interpreter.
"""

from __future__ import annotations

import pytest
import torch
from _aot import run_compile_script

# Spill loads/stores allowed inside a loop of a default tile's SASS: none (scripts/static_report.py
# measures every default under triton 3.6 and 3.9).
MAX_SPILL_OPS_IN_LOOPS = 0

SCRIPT = r'''
import contextlib, io, json, os, re, subprocess, sys, tempfile
sys.path.insert(0, sys.argv[1])
import torch
from _aot import compile_kernel, ptxas_facts
from static_sass import local_memory_in_loops, parse_sass, ptxas_log, sass_of

from polytrace_kernels.attention import kernel as A
from polytrace_kernels.attention import kernel_ext as AX
from polytrace_kernels.attention import api as attn_api
from polytrace_kernels.attention import kernel_decode as AD
from polytrace_kernels.packing import kernel as P
from polytrace_kernels.packing import api as pack_api

out = {}


def build(name, fn, sig, consts, aligned, arch, num_warps, num_stages, spill=False):
    # the environment compile_with_log sets (the same cache entries as scripts/static_report.py);
    # a fresh compile prints its ptxas -v log, not wanted on the RESULT stream
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    with contextlib.redirect_stdout(io.StringIO()):
        ck = compile_kernel(fn, sig, consts, aligned, arch, num_warps, num_stages)
    ptx = ck.asm["ptx"]
    assert ck.asm.get("cubin"), name
    rec = {"mma_sync": len(re.findall(r"\bmma\.sync", ptx)), "wgmma": len(re.findall(r"\bwgmma\.mma_async", ptx)),
           "v4_loads": ptx.count("ld.global.v4"), "shared": ck.metadata.shared}
    if spill:
        rec["spill_in_loops"] = local_memory_in_loops(parse_sass(sass_of(ck.asm["cubin"])))
        # the ptxas -v spill bytes only name a failure's size in its message: one more ptxas run
        # (0.3 s a kernel, 46 kernels: 14 s of the module's 28) only when a loop spills
        rec["spill"] = ptxas_facts(ptxas_log(ptx, arch))["spill_bytes"] if rec["spill_in_loops"] else None
    out[f"{name}@sm{arch}"] = rec


D = 128
DT = "bf16"
dec_cfg = attn_api.default_decode_config(D, on_cuda=True)
block_d = attn_api._block_d(D)
p = f"*{DT}"
i32 = "i32"
strides_qkv = ["stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh"]
# kernel_ext.py's softcap + sliding-window variants: their extra scalars and constexprs (both on)
EXT_SIG = {"softcap_in": "fp32", "softcap_out": "fp32", "win_left": i32, "win_right": i32}
EXT_C = {"SOFTCAP": True, "WINDOW": True}

def build_bwd(tag, arch, D, bwd_cfg, cap, ext=False, causals=(True, False)):
    """dK/dV and dQ kernels with the tiles ``bwd_cfg`` gives (dQ's query tile: the forward's); with
    ``ext`` the softcap + window kernels of kernel_ext.py."""
    block_d = attn_api._block_d(D)
    dkdv_fn, dq_fn = (AX.varlen_bwd_dkdv_ext_kernel, AX.varlen_bwd_dq_ext_kernel) if ext else (
        A.varlen_bwd_dkdv_kernel, A.varlen_bwd_dq_kernel)
    xs, xc = (EXT_SIG, EXT_C) if ext else ({}, {})
    for causal in causals:
        ctag = ("causal" if causal else "full") + tag
        bwd_common = {"Q": p, "K": p, "V": p, "DO": p, "LSE": "*fp32", "DELTA": "*fp32",
                      "cu_seqlens_q": "*i32", "cu_seqlens_k": "*i32", "work_seq": "*i32", "work_block": "*i32",
                      "stride_dot": i32, "stride_doh": i32, "stride_lh": i32, "softmax_scale": "fp32",
                      "qk_scale_log2": "fp32", "group": i32}
        bwd_common.update({s: i32 for s in strides_qkv}, **xs)
        aligned = ["Q", "K", "V", "DO", "LSE", "DELTA", "stride_dot", "stride_doh"] + strides_qkv
        sig = dict(bwd_common, DK=p, DV=p, stride_dkt=i32, stride_dkh=i32, stride_dvt=i32, stride_dvh=i32,
                   n_heads_kv=i32)
        build(f"dkdv-{ctag}", dkdv_fn, sig,
              {"HEAD_DIM": D, "BLOCK_D": block_d, "BLOCK_M": bwd_cfg["DKDV_BLOCK_M"],
               "BLOCK_N": bwd_cfg["DKDV_BLOCK_N"], "CAUSAL": causal, "EVEN_D": True, **xc},
              aligned + ["DK", "DV", "stride_dkt", "stride_dkh", "stride_dvt", "stride_dvh"], arch,
              bwd_cfg["DKDV_WARPS"], bwd_cfg["DKDV_STAGES"], spill=True)
        sig = dict(bwd_common, DQ=p, stride_dqt=i32, stride_dqh=i32, n_heads_q=i32)
        build(f"dq-{ctag}", dq_fn, sig,
              {"HEAD_DIM": D, "BLOCK_D": block_d, "BLOCK_M": attn_api.default_fwd_config(D, capability=cap)["BLOCK_M"],
               "BLOCK_N": bwd_cfg["DQ_BLOCK_N"], "CAUSAL": causal, "EVEN_D": True, **xc},
              aligned + ["DQ", "stride_dqt", "stride_dqh"], arch, bwd_cfg["DQ_WARPS"], bwd_cfg["DQ_STAGES"],
              spill=True)
        out[f"dkdv-{ctag}@sm{arch}"]["cfg"] = [bwd_cfg[k] for k in ("DKDV_BLOCK_M", "DKDV_BLOCK_N", "DKDV_WARPS",
                                                                    "DKDV_STAGES")]


for arch in (90, 80):
    # the backward tiles varlen_attention picks on a device of this compute capability
    cap = (arch // 10, arch % 10)
    fwd_cfg = attn_api.default_fwd_config(D, torch.bfloat16, capability=cap)
    bwd_cfg = attn_api.default_bwd_config(D, torch.bfloat16, on_cuda=True, capability=cap)
    build_bwd("", arch, D, bwd_cfg, cap)
    build_bwd("-d64", arch, 64, attn_api.default_bwd_config(64, torch.bfloat16, on_cuda=True, capability=cap), cap)
    # softcap + window (kernel_ext.py): D=128 causal, the default tiles
    build_bwd("-ext", arch, D, attn_api.default_bwd_config(D, torch.bfloat16, on_cuda=True, capability=cap, ext=True),
              cap, ext=True, causals=(True,))
    for causal, ext in ((True, False), (False, False), (True, True)):
        tag = ("causal" if causal else "full") + ("-ext" if ext else "")
        xs, xc = (EXT_SIG, EXT_C) if ext else ({}, {})
        sig = {"Q": p, "K": p, "V": p, "O": p, "LSE": "*fp32", "cu_seqlens_q": "*i32", "cu_seqlens_k": "*i32",
               "work_seq": "*i32", "work_block": "*i32", "qk_scale_log2": "fp32", "n_slots": i32,
               "n_heads_q": i32, "group": i32, **xs}
        sig.update({s: i32 for s in strides_qkv + ["stride_ot", "stride_oh", "stride_lh"]})
        build(f"fwd-{tag}", AX.varlen_fwd_ext_kernel if ext else A.varlen_fwd_kernel, sig,
              {"HEAD_DIM": D, "BLOCK_D": block_d, "BLOCK_M": fwd_cfg["BLOCK_M"], "BLOCK_N": fwd_cfg["BLOCK_N"],
               "CAUSAL": causal, "HEADS_INNER": True, "EVEN_D": True, **xc},
              ["Q", "K", "V", "O", "LSE"] + strides_qkv + ["stride_ot", "stride_oh"], arch,
              fwd_cfg["num_warps"], fwd_cfg["num_stages"], spill=True)
    # _bwd launches the preprocess with BLOCK_T=64 and the default 4 warps / 3 stages
    build("bwd-preprocess", A.bwd_preprocess_kernel,
          {"O": p, "DO": p, "DELTA": "*fp32", "n_tokens": i32, "n_heads": i32, "stride_ot": i32, "stride_oh": i32,
           "stride_dot": i32, "stride_doh": i32, "stride_dh": i32},
          {"HEAD_DIM": D, "BLOCK_D": block_d, "BLOCK_T": 64},
          ["O", "DO", "DELTA", "stride_ot", "stride_oh", "stride_dot", "stride_doh"], arch, 4, 3)
    # decode: GQA group 8 (BLOCK_G 16), contiguous and paged (page size 16), split and single-split
    for paged, single in ((False, False), (True, False), (False, True)):
        tag = ("paged" if paged else "contig") + ("-single" if single else "")
        sig = {"Q": p, "K": p, "V": p, "SEQLENS": "*i32", "BLOCK_TABLE": "*i32", "O": p, "O_PART": "*fp32",
               "LSE_PART": "*fp32", "qk_scale_log2": "fp32", "n_heads_kv": i32, "group": i32, "split_tokens": i32,
               "max_len": i32}
        strides = ["stride_qb", "stride_qh", "stride_kb", "stride_kt", "stride_kh", "stride_vb", "stride_vt",
                   "stride_vh", "stride_ob", "stride_oh", "stride_pb", "stride_ph", "stride_ps", "stride_lb",
                   "stride_lh", "stride_btb"]
        sig.update({s: i32 for s in strides})
        build(f"decode-split-{tag}", A.decode_split_kernel, sig,
              {"HEAD_DIM": D, "BLOCK_D": block_d, "BLOCK_G": 16, "BLOCK_N": dec_cfg["BLOCK_N"],
               "PAGE_SIZE": 16 if paged else 1, "PAGED": paged, "SINGLE_SPLIT": single, "EVEN_D": True,
               "CHUNK_PAGES": attn_api.decode_chunk_pages(16, dec_cfg["BLOCK_N"]) if paged else 1},
              ["Q", "K", "V", "O", "O_PART", "stride_qb", "stride_qh", "stride_kb", "stride_kt", "stride_kh",
               "stride_vb", "stride_vt", "stride_vh", "stride_ob", "stride_oh", "stride_pb", "stride_ph"],
              arch, dec_cfg["num_warps"], dec_cfg["num_stages"], spill=True)
    # the softcap / window / multi-token decode (a separate binary: the default one above has them
    # compiled out), every feature on, 32 (token, head) rows
    build("decode-split-ext-paged", AD.decode_split_ext_kernel,
          dict(sig, softcap_in="fp32", softcap_out="fp32", win_left=i32, win_right=i32, seqlen_q=i32),
          {"HEAD_DIM": D, "BLOCK_D": block_d, "BLOCK_G": 32, "BLOCK_N": dec_cfg["BLOCK_N"], "PAGE_SIZE": 16,
           "PAGED": True, "SINGLE_SPLIT": False, "EVEN_D": True, "SOFTCAP": True, "WINDOW": True, "MULTI": True,
           "CHUNK_PAGES": attn_api.decode_chunk_pages(16, dec_cfg["BLOCK_N"])},
          ["Q", "K", "V", "O", "O_PART", "stride_qb", "stride_qh", "stride_kb", "stride_kt", "stride_kh",
           "stride_vb", "stride_vt", "stride_vh", "stride_ob", "stride_oh", "stride_pb", "stride_ph"],
          arch, dec_cfg["num_warps"], dec_cfg["num_stages"], spill=True)
    build("decode-combine", A.decode_combine_kernel,
          {"O_PART": "*fp32", "LSE_PART": "*fp32", "SEQLENS": "*i32", "O": p, "LSE": "*fp32",
           "stride_pb": i32, "stride_ph": i32, "stride_ps": i32, "stride_lb": i32, "stride_lh": i32,
           "stride_ob": i32, "stride_oh": i32, "stride_fb": i32, "n_heads_q": i32, "split_tokens": i32,
           "max_len": i32},
          {"HEAD_DIM": D, "BLOCK_D": block_d, "BLOCK_S": 16, "N_SPLITS_POW2": 32},
          ["O_PART", "O", "stride_pb", "stride_ph", "stride_ps", "stride_ob", "stride_oh"], arch, 4, 3)
    # packing: hidden-state rows (F = 4096 bf16, aligned) and per-token scalars (F = 1, fp32)
    for feat, dt in ((4096, "bf16"), (1, "fp32")):
        # the launcher's default (the tuning table is only consulted on a CUDA device)
        cfg = pack_api._config("pack", feat, torch.bfloat16 if dt == "bf16" else torch.float32,
                               torch.device("cpu"), None)
        consts = {"BLOCK_T": cfg["BLOCK_T"], "BLOCK_F": cfg["BLOCK_F"]}
        aligned_f = ["S", "F", "stride_pb", "stride_ps"] if feat % 16 == 0 else ["S"]
        sig = {"padded_ptr": f"*{dt}", "packed_ptr": f"*{dt}", "cu_ptr": "*i32", "T": i32, "S": i32, "F": i32,
               "stride_pb": i32, "stride_ps": i32}
        if feat == 1:
            # F = 1 and stride 1 are specialised to constants at launch
            sig.pop("F"), sig.pop("stride_ps")
            consts.update({"F": 1, "stride_ps": 1})
        build(f"pack-F{feat}", P._pack_kernel, sig, consts, ["padded_ptr", "packed_ptr"] + aligned_f, arch,
              cfg["num_warps"], 3)
        build(f"unpack-F{feat}", P._unpack_kernel, sig, consts, ["padded_ptr", "packed_ptr"] + aligned_f, arch,
              cfg["num_warps"], 3)
print("RESULT " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def compiled() -> dict:
    return run_compile_script(SCRIPT, timeout_s=600)


ARCHS = (90, 80)
BWD_TAGS = [f"{c}{d}" for c in ("causal", "full") for d in ("", "-d64")] + ["causal-ext"]
MATMUL_KERNELS = [f"fwd-{c}" for c in ("causal", "full", "causal-ext")] + [
    f"{k}-{t}" for k in ("dkdv", "dq") for t in BWD_TAGS] + [
    "decode-split-contig", "decode-split-paged", "decode-split-contig-single", "decode-split-ext-paged"]


def test_every_kernel_compiles(compiled):
    expected = set(MATMUL_KERNELS) | {"bwd-preprocess", "decode-combine", "pack-F4096", "unpack-F4096", "pack-F1",
                                      "unpack-F1"}
    assert set(compiled) == {f"{k}@sm{a}" for k in expected for a in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", MATMUL_KERNELS)
def test_matmul_kernels_use_tensor_cores(compiled, name, arch):
    rec = compiled[f"{name}@sm{arch}"]
    assert rec["mma_sync"] + rec["wgmma"] > 0, f"{name} does not use tensor cores on sm{arch}"
    if arch == 80:
        assert rec["wgmma"] == 0  # sm_80 has no wgmma: its presence would mean a wrong target


@pytest.mark.parametrize("causal", ["causal", "full", "causal-ext"])
def test_forward_uses_wgmma_on_hopper(compiled, causal):
    # 128-row tiles on 8 warps (two warpgroups of 64 rows): the Hopper MMA applies
    assert compiled[f"fwd-{causal}@sm90"]["wgmma"] > 0


# Every matmul kernel on both archs, the backward with the tiles varlen_attention picks for the
# arch (default_bwd_config's capability): on sm_80 the Hopper dK/dV tile (32x128, 8 warps, 3
# stages) spilled 64 B (full) / 120 B (causal) at D=128 under triton 3.9 and 168 / 344 B under 3.6.
# The softcap + window dK/dV tile (default_bwd_config(ext=True): 16x128 at D=128 on sm_90a) is
# checked as every other: its 32x128 predecessor spilled 3 LDL inside the loop under triton 3.6.
SPILL_CHECKED = [(name, arch) for name in MATMUL_KERNELS for arch in ARCHS]


@pytest.mark.parametrize(("name", "arch"), SPILL_CHECKED)
def test_default_tiles_do_not_spill_inside_loops(compiled, name, arch):
    rec = compiled[f"{name}@sm{arch}"]
    assert len(rec["spill_in_loops"]) <= MAX_SPILL_OPS_IN_LOOPS, \
        f"{name} {rec.get('cfg', '')} spills inside a loop on sm{arch} ({rec['spill']} B a thread): " \
        f"{rec['spill_in_loops'][:3]}"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["pack-F4096", "unpack-F4096"])
def test_aligned_packing_uses_vector_loads(compiled, name, arch):
    assert compiled[f"{name}@sm{arch}"]["v4_loads"] > 0, f"{name} lost its 16-byte loads on sm{arch}"


# The backward's block choice by compute capability, and no CUDA query on the CPU path (cheap:
# no compile; the capability-dependent tiles are the ones compiled above).


def _bwd_default(head_dim, capability):
    from polytrace_kernels.attention import api

    return api.default_bwd_config(head_dim, torch.bfloat16, on_cuda=True, capability=capability)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_backward_tiles_follow_capability(head_dim):
    hopper = _bwd_default(head_dim, None)
    assert _bwd_default(head_dim, (9, 0)) == hopper and _bwd_default(head_dim, (10, 0)) == hopper
    ampere = _bwd_default(head_dim, (8, 0))
    assert _bwd_default(head_dim, (8, 6)) == ampere == _bwd_default(head_dim, (8, 9))
    dkdv = ("DKDV_BLOCK_M", "DKDV_BLOCK_N", "DKDV_WARPS", "DKDV_STAGES")
    assert [ampere[k] for k in dkdv] != [hopper[k] for k in dkdv]  # the Hopper tile spills on sm_80
    # dQ: Hopper's 64-key wgmma tile at D=128 spills 84 B or more on sm_80, which keeps 32 keys
    dq_keys = {64: 64, 128: 32}[head_dim]
    assert ampere["DQ_BLOCK_N"] == dq_keys and hopper["DQ_BLOCK_N"] == 64 and hopper["DKDV_BLOCK_N"] >= 64


def test_capability_queried_once_per_device_and_never_on_cpu(monkeypatch):
    from polytrace_kernels.attention import api

    calls = []

    def fake_capability(index):
        calls.append(index)
        return (8, 0)

    monkeypatch.setattr(torch.cuda, "get_device_capability", fake_capability)
    api._capability.cache_clear()
    try:
        assert api.device_capability(torch.device("cpu")) is None
        assert api.device_capability(torch.device("cuda", 1)) is None  # interpreter (conftest): no query
        assert calls == []
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        assert api.device_capability(torch.device("cuda", 1)) == (8, 0)
        assert api.device_capability(torch.device("cuda", 1)) == (8, 0)
        assert calls == [1]
    finally:
        api._capability.cache_clear()


def test_cpu_backward_makes_no_cuda_query(monkeypatch):
    from polytrace_kernels.attention import api

    def no_cuda(*args, **kwargs):
        raise AssertionError("CUDA queried on the CPU path")

    monkeypatch.setattr(torch.cuda, "get_device_capability", no_cuda)
    monkeypatch.setattr(torch.cuda, "current_device", no_cuda)
    api._capability.cache_clear()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(24, 2, 16, generator=gen).half().requires_grad_() for _ in range(3))
    cu = torch.tensor([0, 7, 24], dtype=torch.int32)
    api.varlen_attention(q, k, v, cu, cu, causal=True).float().sum().backward()
    assert all(t.grad is not None and bool(torch.isfinite(t.grad).all()) for t in (q, k, v))
