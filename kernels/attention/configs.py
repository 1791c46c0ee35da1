"""Launch configs of the attention family: the tuning search space and buckets, the default tiles
per head dim and GPU (with the offline spill measurements behind them), the compute-capability
query and the merge with a caller's or a tuned config. Apart from ``api.py`` so the block
choice reads on its own; no kernel is launched here.
"""

from __future__ import annotations

import functools

import torch

try:  # vendoring kernels/attention alone must work: the tuning table is optional
    from .._tuning import lookup as _tuning_lookup
except ImportError:  # pragma: no cover - exercised only when vendored
    _tuning_lookup = None

try:  # the one reading of TRITON_INTERPRET (kernels/_interpreter.py); vendored alone: triton's own knob
    from .._interpreter import check_runnable as _check_runnable
    from .._interpreter import interpreting as _interpreting
except ImportError:  # pragma: no cover - exercised only when vendored
    def _interpreting() -> bool:
        from triton import knobs

        return bool(knobs.runtime.interpret)

    def _check_runnable(tensor, name: str) -> None:
        if tensor.device.type != "cuda" and not (tensor.device.type == "cpu" and _interpreting()):
            raise ValueError(f"{name} is on {tensor.device}: these Triton kernels need CUDA tensors, or CPU "
                             "tensors under the Triton interpreter (TRITON_INTERPRET=1)")

# Search space of the forward for ``polytrace tune`` (BLOCK_M x BLOCK_N x warps x stages).
TUNING_SPACE = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [32, 64, 128],
    "num_warps": [4, 8],
    "num_stages": [2, 3, 4],
}


# Shared memory a block may use (opt-in maximum, bytes), by compute capability: CUDA C++
# Programming Guide, "Features and Technical Specifications" (9.0: 227 KB, 8.0: 163 KB, 8.6 / 8.9:
# 99 KB, 7.5: 64 KB).
_SMEM_PER_BLOCK = {(9, 0): 227 * 1024, (8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 9): 99 * 1024, (7, 5): 64 * 1024}


def fwd_shared_bytes(config: dict, head_dim: int, dtype=torch.bfloat16) -> int:
    """Shared memory the forward's tile takes: the Q tile plus ``num_stages`` K and V tiles (one
    K-or-V buffer with a single stage). Matches triton.compile's metadata for sm_90a (3.9, bf16):
    128x64 / 3 stages 128 KB at D=128 and 64 KB at D=64; 64x64 / 3 stages 112 KB at D=128; 64x32 /
    1 stage 48 KB at D=256 (scripts/static_report.py). A pure function of the config: no compile."""
    elem = torch.empty((), dtype=dtype).element_size()
    bd = _block_d(head_dim)
    q = config["BLOCK_M"] * bd * elem
    kv = config["BLOCK_N"] * bd * elem
    stages = int(config.get("num_stages", 1))
    return q + (2 * stages * kv if stages > 1 else kv)


def smem_per_block(capability: tuple[int, int]) -> int:
    """Opt-in shared memory per block of a capability (the nearest known one at or below it)."""
    known = [c for c in sorted(_SMEM_PER_BLOCK) if c <= tuple(capability)]
    return _SMEM_PER_BLOCK[known[-1] if known else min(_SMEM_PER_BLOCK)]


def config_fits(config: dict, head_dim: int, dtype=torch.bfloat16, capability: tuple[int, int] | None = None) -> bool:
    """Whether the forward tile ``config`` fits the shared memory of a GPU of ``capability`` (None:
    the interpreter, no limit). ``polytrace tune`` drops a candidate that does not before compiling."""
    return capability is None or fwd_shared_bytes(config, head_dim, dtype) <= smem_per_block(capability)


def tuning_candidates(head_dim: int, dtype=torch.bfloat16, capability: tuple[int, int] = (9, 0)) -> list[dict]:
    """Every forward config of ``TUNING_SPACE`` whose tile fits the GPU's shared memory, in the
    space's order: the ones that cannot fit are dropped before anything compiles (at D=128 on
    sm_90 4 of 36 do not fit, at D=256 18 of 36)."""
    import itertools

    keys = sorted(TUNING_SPACE)
    combos = (dict(zip(keys, values)) for values in itertools.product(*(TUNING_SPACE[k] for k in keys)))
    return [cfg for cfg in combos if config_fits(cfg, head_dim, dtype, capability)]


def tuning_bucket(head_dim: int, dtype, causal: bool = True, group: int = 1) -> str:
    """Bucket of the forward's tuned config. Deliberately independent of the batch (lengths,
    token count): block sizes fixed by head dim and dtype keep a sequence's result bitwise the
    same however it is packed."""
    name = str(dtype).replace("torch.", "")
    return f"d{int(head_dim)}-{name}-{'causal' if causal else 'full'}-g{int(group)}"


def _block_d(head_dim: int) -> int:
    return max(16, 1 << (int(head_dim) - 1).bit_length())


# Defaults. GPU tiles follow the Triton fused-attention tutorial's Hopper choices (fwd 128x64 on 8
# warps; dK/dV 32 query rows x 128 keys), checked offline with ptxas for sm_90a: fwd 128x64 on 8
# warps uses 186 registers at D=128 and 115 at D=64, no spill (128x128 needs 250; 4 warps spill
# 400 B at D=128). A starting point for ``polytrace tune``, not yet timed on a GPU. In the
# interpreter every tile is a numpy op, so 16x16 tiles keep the CPU tests fast and still cover
# multi-block sequences.
def _on_gpu(on_cuda: bool | None, capability) -> bool:
    """A capability names a GPU: its default, even in the interpreter (how the CPU tests run every
    GPU's tiles). Otherwise ``on_cuda`` decides, by default "not interpreting"."""
    if capability is not None:
        return True
    return (not _interpreting()) if on_cuda is None else bool(on_cuda)


def default_fwd_config(head_dim: int, dtype=torch.bfloat16, on_cuda: bool | None = None,
                       capability: tuple[int, int] | None = None) -> dict:
    """Forward tile for ``head_dim``: the interpreter's 16x16, or the GPU's (the same on sm_80 and
    sm_90) when ``on_cuda`` or a ``capability`` is given."""
    on_cuda = _on_gpu(on_cuda, capability)
    if not on_cuda:
        return {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    if head_dim <= 64:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    if head_dim <= 128:
        if capability is None or tuple(capability) >= (9, 0):
            # 128x128 / 8 warps / 2 stages (sm_90a, bf16): 0 B spilled, 246-254 registers, 160 KB;
            # its main loop takes 8.42 / 8.05 SASS instructions per score element a thread holds
            # (539 / 515 a step, triton 3.9 / 3.6, causal; 9.47 / 9.06 before the scale was folded
            # into exp2's FFMA) against 12.53 / 11.75 for 128x64 / 3 stages (171 / 166 registers):
            # the softmax's per-row work (max, sum, rescale) is shared by twice the keys.
            # scripts/static_report.py predicts 1.05 / 1.07 of FA3's 616 TF/s against 0.90 / 0.93.
            return {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2}
        # sm_80: 128x64 / 3 stages (128 KB of the A100's 163 KB); not re-searched on mma.sync
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    # D=256: 2 stages spilled 112 B a thread (sm_90a, triton 3.9, 255 registers); one stage: 0 B,
    # 235 registers, 48 KB shared memory, two CTAs per SM (scripts/static_report.py). On sm_80 the
    # 4-warp tile still spilled 64 B (3.9) / 128 B (3.6); on 8 warps: 0 B, 196-209 registers.
    if capability is not None and tuple(capability) < (9, 0):
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 1}
    return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}


def short_fwd_config(head_dim: int, dtype=torch.bfloat16, on_cuda: bool | None = None,
                     capability: tuple[int, int] | None = None) -> dict:
    """Forward tile for batches of short sequences (RL micro-batches of 8192 x 34 tokens): 64 query
    rows on 4 warps (one Hopper warpgroup) wastes half as many padded rows per sequence as the
    128-row default and fits two CTAs per SM (D=128, sm_90a, triton 3.9: 172 registers, 112 KB
    shared memory). Opt-in (``varlen_attention(..., config=short_fwd_config(d))``), never picked
    from the batch's lengths: a tile chosen per batch would make a sequence's bits depend on the
    sequences packed with it. At D > 128 it is the default tile (already 64 rows)."""
    on_cuda = _on_gpu(on_cuda, capability)
    if not on_cuda or head_dim > 128:
        return default_fwd_config(head_dim, dtype, on_cuda, capability)
    if capability is not None and tuple(capability) < (9, 0):
        # sm_80 (164 KB shared memory a SM): 3 stages took 88 KB, one CTA; 2 stages: 56 KB, 255
        # registers x 128 threads, two CTAs, 0 B spilled (triton 3.6 and 3.9)
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}


def default_bwd_config(head_dim: int, dtype=torch.bfloat16, on_cuda: bool | None = None,
                       capability: tuple[int, int] | None = None, ext: bool = False) -> dict:
    """dK/dV tile (``DKDV_BLOCK_M`` query rows per step x ``DKDV_BLOCK_N`` keys) and the dQ key
    step ``DQ_BLOCK_N``; the dQ query tile is the forward's BLOCK_M so it reuses its work list.
    ``capability`` is the GPU's compute capability (``varlen_attention`` passes the device's);
    None means Hopper's choice. Depends on head dim and device only, never on the batch.

    Hopper (>= 9.0): tiles whose main loops run on wgmma (HGMMA) with no spill load or store
    inside any loop (spills before or after the loops cost once per program), read from the SASS
    by scripts/static_report.py (sm_90a, triton 3.6 and 3.9, bf16, causal and not):
    D=64:  dK/dV 32x128 / 8 warps / 3 stages: 12 HGMMA a step, 0 B; dQ 128x64 / 8 warps / 3 stages.
    D=128: dK/dV 32x128 / 8 warps / 3 stages: 20 HGMMA a step, 255 registers, 16-88 B (3.9) /
           16-96 B (3.6) spilled, none inside a loop (2 stages: 14 spill ops inside the loop);
           dQ 128x64 / 8 warps / 2 stages: 20 HGMMA, 0 B, 128 KB (was 64x32 on mma.sync and dQ N=32).
    D=256: dQ 64x64 / 8 warps / 2 stages: 68 HGMMA, 0-96 B, none inside a loop, 192 KB. dK/dV stays
           32x32 / 8 warps / 1 stage on mma.sync (0 B): every wgmma tile tried (16-64 x 64, 4-8
           warps, 1-3 stages) spills 47-153 loads/stores inside the loop, its two [64, 256] fp32
           accumulators alone taking 128 registers a thread at 8 warps.

    Below 9.0 (A100 and the other Ampere/Ada parts) the Hopper dK/dV tile spills on sm_80: D=128
    32x128/8 warps/3 stages 64 B (full) / 120 B (causal) per thread under triton 3.9, 168 / 344 B
    under 3.6. ``_SM80_DKDV`` holds the offline search's picks; see the comment there. The sm_80 dQ
    tiles (64 keys at D=64, 32 at D=128, 16 at D > 128) do not spill (0 B, both versions, causal
    and not, fp16 and bf16; dQ 128x64 at D=128 spills 84 B or more at every warps/stages setting
    there). Not yet timed on a GPU. A ``capability`` always gives that GPU's tiles (also in the
    interpreter, where the CPU tests run them).

    ``ext``: the softcap / window kernels (kernel_ext.py). At D=128 on Hopper their dK/dV runs
    16x128 / 8 warps / 3 stages: 0 B spilled, 18 HGMMA a step, 241 / 223 registers (triton 3.6 /
    3.9, causal, softcap and window on), predicted 0.68 of FA3 bwd. The plain 32x128 tile spilled 144
    B with 3 LDL inside the loop under 3.6 (80 B, none inside, under 3.9); 32x128 at 2 or 4 stages,
    32x64 / 4 warps, 64x64 and 64x128 spilled 176-2728 B with 7-257 spill ops inside the loop."""
    on_cuda = _on_gpu(on_cuda, capability)
    if not on_cuda:
        return {"DKDV_BLOCK_M": 16, "DKDV_BLOCK_N": 16, "DKDV_WARPS": 4, "DKDV_STAGES": 1,
                "DQ_BLOCK_N": 16, "DQ_WARPS": 4, "DQ_STAGES": 1}
    if head_dim <= 64:
        cfg = {"DKDV_BLOCK_M": 32, "DKDV_BLOCK_N": 128, "DKDV_WARPS": 8, "DKDV_STAGES": 3,
               "DQ_BLOCK_N": 64, "DQ_WARPS": 8, "DQ_STAGES": 3}
    elif head_dim <= 128:
        cfg = {"DKDV_BLOCK_M": 16 if ext else 32, "DKDV_BLOCK_N": 128, "DKDV_WARPS": 8, "DKDV_STAGES": 3,
               "DQ_BLOCK_N": 64, "DQ_WARPS": 8, "DQ_STAGES": 2}
    else:
        cfg = {"DKDV_BLOCK_M": 32, "DKDV_BLOCK_N": 32, "DKDV_WARPS": 8, "DKDV_STAGES": 1,
               "DQ_BLOCK_N": 64, "DQ_WARPS": 8, "DQ_STAGES": 2}
    if capability is not None and tuple(capability) < (9, 0):
        if head_dim > 128:  # dQ 64 keys at D=256 is Hopper's (192 KB): 16 keys / 2 stages on sm_80
            return dict(cfg, DQ_BLOCK_N=16)
        cfg.update(_SM80_DKDV[64 if head_dim <= 64 else 128])
        if head_dim > 64:
            cfg.update(DQ_BLOCK_N=32, DQ_STAGES=3)
    return cfg


# dK/dV tiles for compute capability < 9.0, from an offline search (triton.compile for sm_80, ptxas
# -v spill bytes per thread, triton 3.6 and 3.9, causal and not, bf16; fp16 rechecked for the picks
# and runners-up, same bytes) over BLOCK_M, BLOCK_N in {16..128}, 4 or 8 warps, 1-3 stages, 192
# configs. Rule: 0 B spilled in every compile; shared memory <= 99 KB, so sm_86/sm_89 (99 KB a
# block) launch it too, not only the A100 (163 KB); then the largest tile BLOCK_M x BLOCK_N (more
# work per program); then the larger BLOCK_N (each key tile re-reads all of Q and dO: 2 x BLOCK_N
# flops per byte loaded, whatever BLOCK_M); then more stages.
#   D=128: 64x64, 8 warps, 1 stage: 0 B, 228 registers, 80 KB shared. Larger tiles all spill or
#          overflow 99 KB: 128x64/8w/1 stage 0 B but 112 KB; 64x128/8w 348-19984 B; 32x128/8w (the
#          Hopper tile) 64-372 B; 128x32/8w/1 stage 0 B, 96 KB (same area, BLOCK_N 32). With 2 or 3
#          stages 64x64 spills 16-76 B; the pipelined spill-free tiles are 32x64 and 64x32 at 8 warps.
#   D=64:  32x128, 8 warps, 1 stage: 0 B, 240 registers, 44 KB shared (the Hopper tile, so the
#          same key tiles and dK/dV work list). With 3 stages it spills 28-36 B under triton 3.6
#          (0 under 3.9), with 2 stages 76 B causal (3.6). 64x64 and 64x128 spill 24-22228 B at
#          every setting; 128x32/8w/2-3 stages is spill-free (BLOCK_N 32: 4x the Q/dO reads).
# Candidates for ``polytrace tune`` on an A100; none of this is timed yet.
_SM80_DKDV = {
    64: {"DKDV_BLOCK_M": 32, "DKDV_BLOCK_N": 128, "DKDV_WARPS": 8, "DKDV_STAGES": 1},
    128: {"DKDV_BLOCK_M": 64, "DKDV_BLOCK_N": 64, "DKDV_WARPS": 8, "DKDV_STAGES": 1},
}


@functools.lru_cache(maxsize=16)
def _capability(index: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """Compute capability of a CUDA device (queried once per device, at the first launch), None
    elsewhere and in the interpreter (no CUDA query on the CPU path)."""
    if device.type != "cuda" or _interpreting():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability(index)


def default_decode_config(head_dim: int, on_cuda: bool | None = None,
                          capability: tuple[int, int] | None = None) -> dict:
    """Decode tile and split size: ``SPLIT_TOKENS`` 0 means ``choose_split_tokens`` picks it from the
    batch, cache length and SM count at launch. GPU values (the same on sm_80 and sm_90) when
    ``on_cuda`` or a ``capability`` is given."""
    on_cuda = _on_gpu(on_cuda, capability)
    if not on_cuda:
        return {"BLOCK_N": 16, "SPLIT_TOKENS": 32, "num_warps": 4, "num_stages": 1}
    return {"BLOCK_N": 64 if head_dim <= 128 else 32, "SPLIT_TOKENS": 0, "num_warps": 4, "num_stages": 3}


def _resolve(kernel: str, bucket: str, default: dict, config: dict | None, device: torch.device,
             argname: str = "config") -> dict:
    if config is not None:
        if not isinstance(config, dict):
            raise ValueError(f"{argname} must be a dict or None, got {type(config).__name__}")
        merged = dict(default)
        unknown = set(config) - set(default)
        if unknown:
            raise ValueError(f"{argname}: unknown keys {sorted(unknown)}; valid keys {sorted(default)}")
        for key, value in config.items():
            # block sizes feed tl.arange / tl.dot: powers of two >= 16; SPLIT_TOKENS 0 means "choose"
            low = 0 if key == "SPLIT_TOKENS" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{argname}[{key!r}] must be an int >= {low}, got {value!r}")
            if "BLOCK" in key and (value < 16 or value & (value - 1)):
                raise ValueError(f"{argname}[{key!r}] must be a power of two >= 16, got {value}")
        merged.update(config)
        return merged
    if device.type == "cuda" and _tuning_lookup is not None:
        return _tuning_lookup(kernel, bucket, torch.cuda.get_device_name(device), default)
    return dict(default)
