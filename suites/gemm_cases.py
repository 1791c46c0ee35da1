"""Cases of the GEMM suite (``suites/test_gemm.py``): the dense linear layers of the built-in
profiles' models through torch (cuBLAS on a GPU). A baseline, not a kernel of ours: the
composition layer (``polytrace.stepmodel``) prices every stage's dense matmuls with these timings.

Models: the model each built-in profile is estimated with (``polytrace.stepmodel.workloads.PROFILE_DEFAULTS``:
Qwen2.5-32B, Qwen2.5-14B (DeepCoder), Qwen2.5-VL-7B, Qwen2.5-7B, Qwen3-235B-A22B), each at the
tokens of its own profile's micro-batches (so the estimate of every built-in profile finds its
model by name, though Qwen2.5-VL-7B's language model has Qwen2.5-7B's dimensions). Layers, for
``M`` tokens: ``qkv`` (N = (heads + 2 kv_heads) x head_dim, K = hidden), ``o`` (N = hidden,
K = heads x head_dim), ``gate_up`` (N = 2 x intermediate, K = hidden), ``down`` (N = hidden,
K = intermediate) and ``lm_head`` (N = vocab, K = hidden). A mixture-of-experts model's MLP is one
expert's GEMM at the mean tokens an expert gets, ``M x active / experts`` (``experts`` and
``tokens`` in the shape say so), plus its ``router`` (N = experts, K = hidden): the layer names
``polytrace.stepmodel.pricing.linear_layers`` prices.

``M``: the tokens of the profile's representative packed micro-batch (``shapes.token_counts``,
the log-prob and update passes), modes ``fwd`` (``x @ w.T``) and ``bwd`` (its two gradient
matmuls, ``dy @ w`` and ``dy.T @ x``); plus ``DECODE_TOKENS`` (a rollout engine's running batch,
full and in the tail), forward only, weight 0. Shape keys: model, layer, M, N, K, dtype. Outputs
are checked against fp64 on a row subset (d(weight) on as many of its rows).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import checks
from .harness import Case, Provider, on_gpu
from .registry import BenchCase, Bound

SUITE = "gemm"
FAMILY = "gemm"
KERNEL = "linear"
# running sequences of a rollout engine: a full batch (vLLM's default max_num_seqs), and the tail's
# few down to one (a long-tailed rollout spends most of its iterations there)
DECODE_TOKENS = (256, 16, 1)
CPU_TOKENS = 48
# an interpreter-sized stand-in with every layer kind (dimensions awkward on purpose)
CPU_MODEL = {"name": "cpu-tiny", "hidden": 64, "heads": 2, "kv_heads": 1, "head_dim": 32, "intermediate": 96,
             "vocab": 1031, "experts": 0, "active_experts": 0, "moe_intermediate": 0}

TORCH = Provider("torch", kind="baseline")


@dataclass(frozen=True)
class GemmShape:
    model: str
    layer: str
    m: int
    n: int
    k: int
    profile: str
    weight: float
    tokens: int  # tokens of the batch (M is smaller for one expert of a MoE layer)
    experts: int = 0
    seed: int | None = 0
    step: int | None = 0

    def shape(self, dtype: str) -> dict:
        out = {"model": self.model, "layer": self.layer, "M": self.m, "N": self.n, "K": self.k, "dtype": dtype}
        if self.experts:
            out.update(experts=self.experts, tokens=self.tokens)
        return out

    @property
    def id(self) -> str:
        return f"{self.model}-{self.layer}-M{self.m}"


def layers(spec: dict, tokens: int) -> list[tuple[str, int, int, int, int]]:
    """(layer, M, N, K, experts) of one transformer layer and the LM head for ``tokens`` tokens."""
    h, hd = spec["hidden"], spec["head_dim"]
    out = [("qkv", tokens, (spec["heads"] + 2 * spec["kv_heads"]) * hd, h, 0),
           ("o", tokens, h, spec["heads"] * hd, 0)]
    if spec.get("experts"):
        e, k_act, inter = spec["experts"], spec["active_experts"], spec["moe_intermediate"]
        per_expert = max(1, round(tokens * k_act / e))
        out += [("gate_up", per_expert, 2 * inter, h, e), ("down", per_expert, h, inter, e),
                ("router", tokens, e, h, e)]
    else:
        out += [("gate_up", tokens, 2 * spec["intermediate"], h, 0), ("down", tokens, h, spec["intermediate"], 0)]
    out.append(("lm_head", tokens, spec["vocab"], h, 0))
    return out


def _model_dims(name: str) -> dict:
    from polytrace.run.models import get_model

    m = get_model(name)
    return {"name": m.name, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim,
            "intermediate": m.intermediate, "vocab": m.vocab, "experts": m.experts,
            "active_experts": m.active_experts, "moe_intermediate": m.moe_intermediate}


@functools.cache
def gemm_shapes() -> tuple[tuple[str, GemmShape], ...]:
    """(mode, shape) pairs, models in the order of the profiles."""
    from . import shapes

    out = []
    if not on_gpu():
        for layer, m, n, k, e in layers(CPU_MODEL, CPU_TOKENS):
            for mode in ("fwd", "bwd"):
                out.append((mode, GemmShape(CPU_MODEL["name"], layer, m, n, k, "", 1.0, CPU_TOKENS, e, None, None)))
        return tuple(out)
    from polytrace.stepmodel.workloads import PROFILE_DEFAULTS

    seen = set()
    for profile, (model_name, _gpus) in PROFILE_DEFAULTS.items():
        dims = _model_dims(model_name)
        if dims["name"] in seen:
            continue  # model-b-math and model-b-tooluse share their model
        seen.add(dims["name"])
        mb = shapes.token_counts((profile,), per_profile=1)[0]
        for layer, m, n, k, e in layers(dims, mb.total_tokens):
            for mode in ("fwd", "bwd"):
                out.append((mode, GemmShape(dims["name"], layer, m, n, k, profile, mb.weight, mb.total_tokens, e,
                                            mb.seed, mb.step)))
        for tokens in DECODE_TOKENS:
            for layer, m, n, k, e in layers(dims, tokens):
                out.append(("fwd", GemmShape(dims["name"], layer, m, n, k, profile, 0.0, tokens, e, None, None)))
    return tuple(out)


def dtype_name() -> str:
    return "bf16"


@dataclass
class GemmInputs:
    x: object  # [M, K]
    w: object  # [N, K] (a torch Linear's weight)
    dy: object = None  # [M, N] upstream gradient (bwd)


def _inputs(s: GemmShape, mode: str):
    def make(device, seed: int) -> GemmInputs:
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(s.m, s.k, device=device, dtype=torch.bfloat16, generator=gen)
        # init scale 1/sqrt(K): outputs of order 1, as in a trained layer
        w = torch.randn(s.n, s.k, device=device, dtype=torch.bfloat16, generator=gen) * s.k ** -0.5
        dy = torch.randn(s.m, s.n, device=device, dtype=torch.bfloat16, generator=gen) if mode == "bwd" else None
        return GemmInputs(x, w, dy)
    return make


def _bind(mode: str):
    def bind(inp: GemmInputs, kernels) -> Bound:
        x, w, dy = inp.x, inp.w, inp.dy
        if mode == "fwd":
            return Bound(lambda: (x @ w.t(),))
        return Bound(lambda: (dy @ w, dy.t() @ x))  # d(input) and d(weight) of y = x @ w.T
    return bind


def _truth(s: GemmShape, mode: str):
    def truth(inp: GemmInputs) -> dict:
        x, w, dy = inp.x, inp.w, inp.dy
        rows = checks.subset_rows(s.m, device=x.device)
        if mode == "fwd":
            x64 = x[rows].double()
            return {"rows": rows, "want": (x64 @ w.double().t(),), "same": (x[rows] @ w.t(),),
                    "scale": (x64.abs() @ w.double().abs().t(),), "terms": (s.k,)}
        wrows = checks.subset_rows(s.n, device=x.device)  # rows of d(weight)
        dy_r, dy_c = dy[rows].double(), dy[:, wrows].double()
        return {"rows": rows, "wrows": wrows,
                "want": (dy_r @ w.double(), dy_c.t() @ x.double()),
                "same": (dy[rows] @ w, dy[:, wrows].t() @ x),
                "scale": (dy_r.abs() @ w.double().abs(), dy_c.abs().t() @ x.double().abs()),
                "terms": (s.n, s.m)}
    return truth


def _compare(mode: str):
    def compare(out, truth: dict, inp) -> list:
        names = ("y",) if mode == "fwd" else ("d(input)", "d(weight)")
        picks = (truth["rows"],) if mode == "fwd" else (truth["rows"], truth["wrows"])
        # the torch provider *is* torch's computation: held to one rounding of the fp64 truth, never to itself
        return [c for i, name in enumerate(names)
                for c in checks.verify(name, out[i][picks[i]], truth["want"][i], ours=False, torch_same=None,
                                       terms=truth["terms"][i], scale=truth["scale"][i], rounded=True, self_same=True)]
    return compare


def cases() -> list[BenchCase]:
    out = []
    dt = dtype_name()
    for mode, s in gemm_shapes():
        mnk = float(s.m) * s.n * s.k
        flops = 2.0 * mnk if mode == "fwd" else 4.0 * mnk
        e = 2  # bf16
        if mode == "fwd":
            nbytes = e * (s.m * s.k + s.n * s.k + s.m * s.n)
        else:  # read dy, w, x; write d(input), d(weight)
            nbytes = e * (s.m * s.n + 2 * s.n * s.k + 2 * s.m * s.k)
        note = checks.subset_note(s.m)
        row = "a row, exact in fp64 over all of K"
        coverage = {"y": checks.rows_cover(s.m, "rows", row)} if mode == "fwd" else {
            "d(input)": checks.rows_cover(s.m, "rows", row),
            "d(weight)": checks.rows_cover(s.n, "rows", "a row of d(weight), exact in fp64 over all M tokens")}
        if mode == "bwd":
            note += "; d(weight): " + checks.subset_note(s.n)
        meta = Case(FAMILY, KERNEL, TORCH.name, mode, s.shape(dt), flops=flops, bytes_moved=float(nbytes),
                    roofline="bf16", profile=s.profile, seed=s.seed, step=s.step, weight=s.weight,
                    extra={"computes": ["y"] if mode == "fwd" else ["d(input)", "d(weight)"], "check_subset": note,
                           "check_coverage": coverage,
                           "backend": "cuBLAS via torch.matmul" if on_gpu() else "torch CPU matmul"})
        out.append(BenchCase(SUITE, meta, TORCH, _inputs(s, mode), _bind(mode), _truth(s, mode), _compare(mode),
                             label=f"linear-{mode}-{s.id}"))
    return out
