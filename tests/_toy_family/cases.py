"""The toy family's suite cases (as ``suites/<family>_cases.py`` declares a real family's): ``double``
at two CPU shapes, our Triton kernel and torch's ``2 * x``, checked bit-exact against fp64."""

from __future__ import annotations

from suites import checks
from suites.harness import Case, Provider
from suites.registry import BenchCase, Bound

from . import spec

FAMILY, KERNEL, SUITE = "toy", "double", "toy"
FEATURES = 16
PROVIDERS = (Provider("ours", kind="ours"), Provider("torch", kind="baseline"))


def _inputs(tokens: int):
    def make(device, seed: int):
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randn(tokens, FEATURES, generator=gen).to(device)
    return make


def _bind(provider: str):
    def bind(x, kernels) -> Bound:
        if provider == "ours":
            from . import api  # the toy family stands in for ``kernels``: it lives outside the package

            return Bound(lambda: api.double(x))
        return Bound(lambda: 2 * x)
    return bind


def _truth(x):
    from .reference import double_reference

    return double_reference(x)


def _compare(out, want, x) -> list:
    return [checks.exact("y", out.double(), want)]


def cases() -> list[BenchCase]:
    out = []
    for tokens in (64, 256):
        for p in PROVIDERS:
            meta = Case(FAMILY, KERNEL, p.name, "fwd", {"T": tokens, "F": FEATURES, "dtype": "fp32"},
                        bytes_moved=spec.double_bytes(tokens, FEATURES),
                        extra={"check_subset": "every element, bit-exact",
                               "check_coverage": {"y": checks.cover(tokens, tokens, "rows", "bit-exact")}})
            out.append(BenchCase(SUITE, meta, p, _inputs(tokens), _bind(p.name), _truth, _compare,
                                 label=f"{p.name}-T{tokens}"))
    return out
