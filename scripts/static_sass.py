"""Read performance facts from a compiled Triton kernel, without a GPU.

``triton.compile`` lowers a kernel to PTX and a cubin on a CPU-only machine (the triton wheel ships
ptxas, and also ``cuobjdump`` / ``nvdisasm`` in ``triton/backends/nvidia/bin``). From those this
module reads: registers and spills (the ptxas ``-v`` log), shared memory (the compile metadata),
SASS (``cuobjdump -sass``): tensor-core instructions, global load/store widths and the hot loop's
instruction count, and from them CTAs per SM and the bound each kernel implies.

Per-SM limits and issue rates are in ``GPU_LIMITS`` (one row per capability, source beside it).
Nothing here runs at import time; ``compile_kernel`` is the one entry that compiles.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

DIVISIBLE_BY_16 = [["tt.divisibility", 16]]


@dataclass(frozen=True)
class GPULimits:
    """Per-SM resources of one compute capability and the reference part's issue and HBM rates."""
    arch: int
    part: str
    regs_per_sm: int
    smem_per_sm: int  # bytes usable by CTAs of one SM
    smem_reserved_per_cta: int  # bytes the driver reserves per resident CTA
    max_threads: int
    max_ctas: int
    sms: int
    clock_ghz: float  # max boost clock: the issue rate's upper bound
    hbm_bytes_s: float
    tc_flops_s: float  # dense bf16 tensor-core peak of the part
    hmma_share: float  # the share of that peak mma.sync (HMMA) can reach (wgmma: all of it)
    l2_bytes_s: float  # L2 read bandwidth (an estimate: no datasheet states it)
    source: str

    def issue_rate(self) -> float:
        """Thread-instructions per second: 4 schedulers per SM, one warp instruction per clock each."""
        return self.sms * 4 * self.clock_ghz * 1e9 * 32


GPU_LIMITS = {
    90: GPULimits(90, "H200 SXM", 65536, 228 * 1024, 1024, 2048, 32, 132, 1.98, 4.8e12, 989.4e12, 0.5, 5.5e12,
                  "CUDA C++ Programming Guide, compute capability 9.0 table (64K registers, 228 KB shared "
                  "memory per SM, 1 KB reserved per block, 2048 threads, 32 blocks); NVIDIA H100 whitepaper "
                  "(132 SMs, 1.98 GHz max boost); H200 datasheet (4.8 TB/s, 989 TF/s dense bf16); L2 ~5.5 TB/s "
                  "assumed (Chips and Cheese's H100 PCIe microbenchmark, 2023; not measured here); mma.sync at half "
                  "the dense peak assumed (only wgmma reaches the datasheet peak on Hopper; not measured here)"),
    80: GPULimits(80, "A100 80GB SXM", 65536, 164 * 1024, 1024, 2048, 32, 108, 1.41, 2.039e12, 312e12, 1.0, 3.8e12,
                  "CUDA C++ Programming Guide, compute capability 8.0 table (64K registers, 164 KB shared "
                  "memory per SM, 1 KB reserved per block, 2048 threads, 32 blocks); NVIDIA A100 whitepaper "
                  "(108 SMs, 1.41 GHz boost, 2,039 GB/s, 312 TF/s dense bf16); L2 ~3.8 TB/s assumed "
                  "(Chips and Cheese's A100 microbenchmark; not measured here)"),
}

# A warp scheduler rarely issues every cycle (dependent MUFU/shuffle latencies, barrier waits):
# an instruction budget keeps 8% of the issue slots in reserve. With it, the H200's budget for a
# 2-byte element read once is 12.9 instructions (132 x 4 x 1.98 GHz x 32 x 2 B / 4.8 TB/s / 1.08).
ISSUE_HEADROOM = 1.08


def instruction_budget(arch: int, bytes_per_element: float) -> float:
    """Thread-instructions per element at which issue just keeps up with HBM (with the headroom)."""
    lim = GPU_LIMITS[arch]
    return lim.issue_rate() * bytes_per_element / lim.hbm_bytes_s / ISSUE_HEADROOM


def issue_bound_bytes_s(arch: int, instructions_per_element: float, bytes_per_element: float) -> float:
    """HBM rate (bytes/s) at which the issue slots run out, at full issue (no headroom)."""
    return GPU_LIMITS[arch].issue_rate() * bytes_per_element / instructions_per_element


def ctas_per_sm(arch: int, regs: int, num_warps: int, shared: int) -> dict:
    """Resident CTAs per SM by registers (allocated per warp in units of 256), threads and shared
    memory, and the smallest of the three (the occupancy limiter named)."""
    lim = GPU_LIMITS[arch]
    threads = 32 * num_warps
    regs_per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = (lim.regs_per_sm // regs_per_warp) // num_warps
    by_threads = lim.max_threads // threads
    by_smem = lim.smem_per_sm // (shared + lim.smem_reserved_per_cta)
    limits = {"registers": by_regs, "threads": by_threads, "shared memory": by_smem, "blocks": lim.max_ctas}
    limiter = min(limits, key=limits.get)
    return {"ctas": limits[limiter], "limiter": limiter, **{f"by_{k.replace(' ', '_')}": v for k, v in limits.items()}}


# ---------------------------------------------------------------------------------------------
# compiling


def triton_version() -> str:
    import triton

    return triton.__version__


def tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def compile_kernel(fn, sig: dict, consts: dict, aligned, arch: int, num_warps: int, num_stages: int):
    """``triton.compile`` one ``@triton.jit`` kernel for ``sm_<arch>``: ``sig`` types the runtime
    arguments, ``consts`` fixes the constexprs (together they must name every parameter) and
    ``aligned`` lists the arguments declared 16-divisible, as Triton specialises them at launch."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = [p.name for p in fn.params]
    assert set(sig) | set(consts) == set(names), (fn, sorted(set(names) - set(sig) - set(consts)))
    full = {n: sig.get(n, "constexpr") for n in names}
    attrs = {(names.index(n),): DIVISIBLE_BY_16 for n in aligned}
    return triton.compile(ASTSource(fn, full, consts, attrs), target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def compile_with_log(fn, sig, consts, aligned, arch, num_warps, num_stages):
    """Compile and return (compiled kernel, ptxas -v log). Triton runs ptxas with ``-v`` and prints
    its log under TRITON_DUMP_PTXAS_LOG (3.6-3.9); without a log, ptxas runs once more on the PTX."""
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ck = compile_kernel(fn, sig, consts, aligned, arch, num_warps, num_stages)
    log = buf.getvalue()
    if "registers" not in log:
        log = ptxas_log(ck.asm["ptx"], arch)
    return ck, log


def ptxas_log(ptx: str, arch: int) -> str:
    from triton.backends.nvidia.compiler import get_ptxas

    target = re.search(r"^\.target\s+(\S+)", ptx, re.M).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        proc = subprocess.run([get_ptxas(arch).path, f"-arch={target}", "-v", path, "-o", path + ".cubin"],
                              capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def sass_of(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([tool("cuobjdump"), "-sass", path], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


# ---------------------------------------------------------------------------------------------
# reading


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")
_WIDTH = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}


def parse_sass(sass: str) -> list[tuple[int, str]]:
    """(address, instruction text without predicate) for each SASS instruction of the listing."""
    out = []
    for addr, text in _SASS_LINE.findall(sass):
        text = re.sub(r"^@!?U?P[T0-9]+\s+", "", text.strip())
        out.append((int(addr, 16), text))
    return out


def _access_bytes(op: str) -> int:
    """Bytes per thread of one LDG/STG/LDGSTS (width suffix; 4 without one)."""
    for part in op.split(".")[1:]:
        if part in _WIDTH:
            return _WIDTH[part]
    return 4


def _is_global_load(op: str) -> bool:
    return op.startswith("LDG.") or op == "LDG" or op.startswith("LDGSTS")


def branch_target(text: str) -> int | None:
    """The target address of a ``BRA`` instruction (None for any other instruction)."""
    m = re.match(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", text) or re.match(r"BRA\s+0x([0-9a-f]+)", text)
    return int(m.group(1), 16) if m else None


def loops(instrs: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(start, end) addresses of each backward branch: a loop body from its target to the branch."""
    found = []
    for addr, text in instrs:
        target = branch_target(text)
        if target is not None and target < addr:
            found.append((target, addr))
    return found


def body(instrs, start: int, end: int) -> list[str]:
    return [t for a, t in instrs if start <= a <= end and not t.startswith("NOP")]


def sass_summary(sass: str, load_elem_bytes: int | None = None) -> dict:
    """Counts over the whole kernel and over its hot loop (the loop loading the most global bytes
    per thread; ties: the longer). With ``load_elem_bytes`` (the streamed element's size), the
    instructions per element of that loop: its instructions over the elements its loads bring in
    (robust to ptxas unrolling: an unrolled body loads proportionally more)."""
    return sass_summary_of(parse_sass(sass), load_elem_bytes)


def sass_summary_of(instrs: list[tuple[int, str]], load_elem_bytes: int | None = None) -> dict:
    """``sass_summary`` of an already parsed listing."""
    ops = [t.split()[0] if t else "" for _, t in instrs]
    rec = {
        "sass_instructions": sum(1 for o in ops if o != "NOP"),
        "hgmma": sum(o.startswith("HGMMA") for o in ops),
        "hmma": sum(o.startswith("HMMA") for o in ops),
        "mufu_ex2": sum(o == "MUFU.EX2" for o in ops),
        "ldg_widths": _width_counts([o for o in ops if o.startswith("LDG") and not o.startswith("LDGSTS")]),
        "ldgsts_widths": _width_counts([o for o in ops if o.startswith("LDGSTS")]),
        "stg_widths": _width_counts([o for o in ops if o.startswith("STG")]),
        "tma": sum(o.startswith("UTMALDG") for o in ops),
    }
    found = loops(instrs)
    best = None
    for start, end in found:
        b = body(instrs, start, end)
        loaded = sum(_access_bytes(t.split()[0]) for t in b if _is_global_load(t.split()[0]))
        key = (loaded, len(b))
        if best is None or key > best[0]:
            best = (key, b)
    if best is not None:
        (loaded, n), b = best
        rec["loop_instructions"] = n
        rec["loop_load_bytes_per_thread"] = loaded
        rec["loop_mufu_ex2"] = sum(t.startswith("MUFU.EX2") for t in b)
        rec["loop_fsetp_range_checks"] = sum(t.startswith("FSETP.GEU") for t in b)
        if load_elem_bytes and loaded:
            rec["instructions_per_element"] = round(n / (loaded / load_elem_bytes), 2)
    elif load_elem_bytes:
        loaded = sum(_access_bytes(o) for o in ops if _is_global_load(o))
        if loaded:
            rec["instructions_per_element"] = round(rec["sass_instructions"] / (loaded / load_elem_bytes), 2)
    return rec


_HGMMA = re.compile(r"HGMMA\.(\d+)x(\d+)x(\d+)")
_HMMA = re.compile(r"HMMA\.(\d\d)(\d)(\d+)")


def mma_flops(texts: list[str], num_warps: int) -> float:
    """Tensor-core flops one CTA does when it runs ``texts`` once: an ``HGMMA.MxNxK`` is one
    warpgroup's 2*M*N*K (each of the CTA's num_warps / 4 warpgroups issues it), an
    ``HMMA.16816`` one warp's 2*16*8*16 (each warp issues it)."""
    flops = 0.0
    for t in texts:
        m = _HGMMA.match(t)
        if m:
            flops += 2 * int(m.group(1)) * int(m.group(2)) * int(m.group(3)) * max(1, num_warps // 4)
            continue
        m = _HMMA.match(t)
        if m:
            flops += 2 * int(m.group(1)) * int(m.group(2)) * int(m.group(3)) * num_warps
    return flops


def epilogue_per_logit(instrs: list[tuple[int, str]], logits_per_thread: float) -> float:
    """The fused LM-head forward's epilogue: SASS instructions a vocabulary tile runs outside its
    K-loop and outside the cold branch that selects the target logit (taken on the few tiles holding
    a token), per logit of a thread (BLOCK_T x BLOCK_V / threads)."""
    found = loops(instrs)
    outer = max(found, key=lambda r: r[1] - r[0])
    inner = [r for r in found if outer[0] <= r[0] and r[1] <= outer[1] and r != outer]
    after = max(r[1] for r in inner)
    skip = list(inner)
    for addr, text in instrs:
        target = branch_target(text)  # a forward branch after the K-loop: the target-select branch
        if target is not None and after < addr < outer[1] and addr < target <= outer[1]:
            skip.append((addr + 1, target - 1))
    hot = [t for a, t in instrs if outer[0] <= a <= outer[1] and not t.startswith("NOP")
           and not any(lo <= a <= hi for lo, hi in skip)]
    return len(hot) / logits_per_thread


def local_memory_in_loops(instrs: list[tuple[int, str]]) -> list[str]:
    """Spill traffic inside a loop: each local load or store (``LDL`` / ``STL``) whose address lies
    in a loop body (from a backward branch's target to the branch). Spills outside every loop (a
    store before the loops, a load after them) cost once per program, not once per step."""
    spans = loops(instrs)
    return [f"{a:#06x} {t}" for a, t in instrs
            if re.match(r"(LDL|STL)\b", t) and any(lo <= a <= hi for lo, hi in spans)]


def mma_loop(instrs: list[tuple[int, str]], num_warps: int) -> dict:
    """The innermost loop doing the most tensor-core work (of equal ones the shorter): its
    instructions, flops a CTA does per trip and global bytes a thread loads per trip (``{}`` when no
    loop holds an MMA). Innermost: an outer loop's span holds its inner loop's body once, not once
    per inner trip."""
    best = None
    spans = loops(instrs)
    inner = [(s, e) for s, e in spans if not any((s, e) != (a, b) and s <= a and b <= e for a, b in spans)]
    for start, end in inner:
        b = body(instrs, start, end)
        flops = mma_flops(b, num_warps)
        # equal work: the shorter loop is the main one (a causal kernel's masked diagonal loop runs once)
        if flops and (best is None or (flops, -len(b)) > (best["mma_loop_flops"], -best["mma_loop_instructions"])):
            loaded = sum(_access_bytes(t.split()[0]) for t in b if _is_global_load(t.split()[0]))
            best = {"mma_loop_instructions": len(b), "mma_loop_flops": flops, "mma_loop_load_bytes_per_thread": loaded,
                    "mma_loop_hmma_flops": mma_flops([t for t in b if t.startswith("HMMA")], num_warps),
                    "mma_loop_hgmma": sum(t.startswith("HGMMA") for t in b),
                    "mma_loop_hmma": sum(t.startswith("HMMA") for t in b)}
    return best or {}


def tensor_prediction(arch: int, loop: dict, num_warps: int) -> dict:
    """Tensor-core rate one CTA's main loop allows, per SM and cycle: the tensor cores need flops /
    (peak per SM-cycle) cycles a trip (HMMA flops at ``hmma_share`` of the peak), issue needs
    instructions x warps / 4 schedulers (with the ISSUE_HEADROOM), L2 needs the trip's LDG/LDGSTS
    bytes over its per-SM share. Upper: the three overlap perfectly (the largest is the bound);
    predicted: the MMA and the issue of the other instructions do not overlap (Triton waits each
    wgmma out before the softmax or epilogue reads its accumulator), L2 overlapped. Resident CTAs
    scale every term alike, so they cancel."""
    lim = GPU_LIMITS[arch]
    per_cycle = lim.sms * lim.clock_ghz * 1e9
    hmma = loop.get("mma_loop_hmma_flops", 0.0)
    tc = (loop["mma_loop_flops"] - hmma + hmma / lim.hmma_share) / (lim.tc_flops_s / per_cycle)
    issue = loop["mma_loop_instructions"] * num_warps / 4 * ISSUE_HEADROOM
    l2 = loop["mma_loop_load_bytes_per_thread"] * 32 * num_warps / (lim.l2_bytes_s / per_cycle)
    terms = {"tensor core": tc, "issue": issue, "L2": l2}
    bound = max(terms, key=terms.get)
    rate = loop["mma_loop_flops"] * per_cycle  # flops a cycle-per-trip turns into flops/s
    upper = rate / terms[bound]
    serial = rate / max(tc + issue, l2)
    return {"bound": bound, "cycles_per_trip": {k: round(v, 1) for k, v in terms.items()},
            "predicted_tflops": round(serial / 1e12, 1), "upper_tflops": round(upper / 1e12, 1)}


def _width_counts(ops: list[str]) -> dict:
    counts: dict[str, int] = {}
    for o in ops:
        key = f"{8 * _access_bytes(o)}b"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def ptxas_facts(log: str) -> dict:
    """Registers and spill bytes (stores + loads) per thread from a ptxas -v log."""
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    stack = [int(s) for s in re.findall(r"(\d+) bytes stack frame", log)]
    assert regs and spills, log[-2000:]
    return {"registers": max(regs), "spill_bytes": max(int(s) + int(l) for s, l in spills),
            "stack_bytes": max(stack) if stack else 0}


def ttgir_facts(ttgir: str) -> dict:
    """Software pipelining read from the TTGIR: the ``num`` of each ``ttg.async_wait`` (copy groups
    left in flight when it returns: 0 in the loop means each step waits for all of its loads) and
    the count of async copies (cp.async issued by the pipeliner)."""
    return {"async_wait_nums": [int(n) for n in re.findall(r"ttg\.async_wait\b[^\n]*?\{num = (\d+)", ttgir)],
            "async_copies": ttgir.count("async_copy_global_to_local")}


def ptx_facts(ptx: str) -> dict:
    """PTX-level counts: vector loads, ex2 flavours (``.ftz`` avoids the denormal range check)."""
    return {"ptx_ld_global_v4": ptx.count("ld.global.v4"),
            "ptx_ex2_approx": len(re.findall(r"ex2\.approx\.f32\s", ptx)),
            "ptx_ex2_approx_ftz": len(re.findall(r"ex2\.approx\.ftz\.f32", ptx)),
            "ptx_mul_wide_s32": ptx.count("mul.wide.s32"),
            "ptx_wgmma": len(re.findall(r"\bwgmma\.mma_async", ptx)),
            "ptx_mma_sync": len(re.findall(r"\bmma\.sync", ptx))}


# ---------------------------------------------------------------------------------------------
# int32 offsets: a sequence position times a stride


_DEF = re.compile(r"^\s*(%[\w.#:]+?)(?::\d+)? = ([\w.]+)\b(.*)$")
_FOR = re.compile(r"scf\.for (%[\w.]+) = (%[\w.]+) to (%[\w.]+) step (%[\w.]+)")
_ARG = re.compile(r"(%[\w.]+): [^,()]*?(?:\{[^}]*\})?\s*loc\(\"(\w+)\"")
_VIEW_OPS = ("tt.splat", "tt.broadcast", "tt.expand_dims", "arith.extsi", "arith.extui", "tt.reshape")


def int32_position_products(ttir: str) -> list[str]:
    """TTIR ``arith.muli`` in 32 bits whose operands are a ``stride_*`` argument (or a splat /
    broadcast of one) and a value derived from a sequence position: a ``tt.load`` result (lengths,
    offsets, work-list entries) or an ``scf.for`` induction variable whose bounds derive from one.
    Such a product is a token offset times a stride: it wraps at 2^31 (128k tokens x 128 heads x
    128). A remainder by a constant (a page offset) is bounded and clears the taint."""
    strides = {ssa for ssa, name in _ARG.findall(ttir) if name.startswith("stride_")}
    tainted: set[str] = set()
    constants: set[str] = set()
    flagged = []
    for line in ttir.splitlines():
        m_for = _FOR.search(line)
        if m_for:
            var, lo, hi, _ = m_for.groups()
            if lo in tainted or hi in tainted:
                tainted.add(var)
        m = _DEF.match(line)
        if not m:
            continue
        res, op, rest = m.groups()
        res = res.split(":")[0]
        operands = re.findall(r"%[\w.]+", rest.split(" loc(")[0].split(" : ")[0])
        if op == "arith.constant":
            constants.add(res)
            continue
        if op == "tt.load":
            tainted.add(res)
            continue
        if op in _VIEW_OPS and operands and operands[0] in strides:
            strides.add(res)
            continue
        if op in ("arith.remsi", "arith.remui") and len(operands) == 2 and operands[1] in constants:
            continue  # a remainder by a constant (page offset) is bounded by it
        if op.startswith("arith.cmp"):
            continue
        if any(o in tainted for o in operands):
            tainted.add(res)
            if op == "arith.muli" and re.search(r":\s*(tensor<[\dx]*xi32>|i32)\s*(loc|$)", rest) and \
                    any(o in strides for o in operands):
                flagged.append(line.strip()[:160])
    return flagged
