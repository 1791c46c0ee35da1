"""The kernel-family seam (polytrace/stepmodel/families.py, docs/adding-a-kernel-family.md).

- Each family's ``spec.py`` imports without torch or triton (the families' ``__init__`` import
  their ops on first use), so pricing takes its sizes from the specs instead of copies.
- A toy family (tests/_toy_family: spec, a tiny Triton op, an fp64 reference, suite cases) added
  with one registry line is priced by the step model, timed by the suites registry at CPU shapes
  and compared by the gate.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _compose_results import bench, result_file, write
from _toy_family import spec as toy_spec

from polytrace.errors import PolytraceError
from polytrace.run.hardware import get_gpu
from polytrace.run.models import get_model
from polytrace.stepmodel import families
from polytrace.stepmodel.efficiency import DEFAULT
from polytrace.stepmodel.families import KernelFamily
from polytrace.stepmodel.pricing import MEASURED, Pricer, check_speedups
from polytrace.stepmodel.timings import KernelTimings
from polytrace.stepmodel.training import TrainerLayout, pass_cost

ROOT = Path(__file__).resolve().parents[2]
FAMILY_PACKAGES = ("attention", "logprob", "packing")

# The toy family's registry line, as a real family's would read in families.REGISTRY
TOY = KernelFamily("toy", "toy", {"double": toy_spec.double_bytes}, "ours", "toy", spec=toy_spec,
                   trainer_work=lambda w: ("double", "fwd", toy_spec.double_bytes(w.tokens, w.model.hidden)))

_BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
"""


def test_family_specs_and_the_registry_import_without_torch_or_triton():
    code = _BLOCKER + (
        "import polytrace_kernels.attention.spec, polytrace_kernels.logprob.spec, polytrace_kernels.packing.spec\n"
        "import polytrace.stepmodel.families, polytrace.stepmodel.pricing\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')))\n"
        "import polytrace_kernels.attention as a\n"
        "try:\n    a.varlen_attention\nexcept ImportError as e:\n    print('lazy:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # nothing loaded, and the op itself is what asks for torch (on first use, not at import)
    assert proc.stdout.splitlines() == ["[]", "lazy: blocked: torch"]


@pytest.mark.parametrize("name", FAMILY_PACKAGES)
def test_lazy_family_packages_keep_their_public_names(name):
    import importlib

    pkg = importlib.import_module(f"polytrace_kernels.{name}")
    for public in pkg.__all__:
        value = getattr(pkg, public)
        owner = getattr(value, "__module__", None)
        assert owner is None or owner.startswith(f"polytrace_kernels.{name}") or owner.startswith(("typing",
                                                                                                    "builtins"))
    assert set(pkg.__all__) <= set(dir(pkg))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pkg.nope  # noqa: B018


def test_pricing_takes_its_measured_families_from_the_registry():
    assert MEASURED is families.REGISTRY
    assert {n: (f.results_family, f.kernels, f.default_provider) for n, f in MEASURED.items()} == {
        "gemm": ("gemm", ("linear",), "torch"), "attention": ("attention", ("varlen_attention",), "ours"),
        "decode": ("attention", ("decode_attention",), "ours"),
        "logprob": ("logprob", ("token_logprobs", "linear_token_logprobs"), "torch-eager"),
        "packing": ("packing", ("pack", "unpack", "plan_microbatches"), "ours")}
    for f in MEASURED.values():
        for fn in f.sizes.values():  # every size function is the family's own spec function
            assert fn is None or fn.__module__ == f"polytrace_kernels.{f.results_family}.spec"
    assert families.trainer_families() == []
    with pytest.raises(ValueError, match="registered already"), families.registered(TOY), families.registered(TOY):
        pass
    assert "toy" not in MEASURED


def test_every_registered_family_is_measured_by_its_suite():
    """A registry line names a suite whose cases record its kernels under its results family (what
    pricing looks the timings up by)."""
    from suites import registry

    for f in MEASURED.values():
        assert f.suite in registry.SUITES, f.name
        recorded = {(c.meta.family, c.meta.kernel) for c in registry.suite_cases(f.suite)}
        assert {(f.results_family, k) for k in f.kernels} <= recorded, f.name


# --- priced -------------------------------------------------------------------------------------
MODEL, LENS = get_model("qwen2.5-7b"), [100] * 8
LAYOUT = TrainerLayout(n_gpus=1, micro_batch_seqs=2)  # 4 micro-batches of 200 tokens


def _toy_results(tmp_path: Path, rate: float, factor: float = 1.0) -> Path:
    benches = []
    for t in (64, 1024, 16384):
        nbytes = toy_spec.double_bytes(t, MODEL.hidden)
        benches.append(bench("toy", "double", "fwd", "ours", {"T": t, "F": MODEL.hidden}, flops=0.0, nbytes=nbytes,
                             roofline="hbm", median=factor * nbytes / rate))
    return write(tmp_path / "toy.json", result_file(benches))


def test_a_registered_toy_family_is_priced_by_the_step_model(tmp_path):
    gpu = get_gpu("h200")
    size = toy_spec.double_bytes(200.0, MODEL.hidden)
    before = pass_cost(MODEL, gpu, LENS, LAYOUT, backward=False)
    assert "toy" not in before.kernels
    with families.registered(TOY):
        # no timings: its bytes at the roofline, once per micro-batch
        roof = pass_cost(MODEL, gpu, LENS, LAYOUT, backward=False)
        want = 4 * size / (gpu.ceiling("hbm") * DEFAULT.elementwise_hbm)
        assert roof.kernels["toy"] == pytest.approx(want, rel=1e-12) and roof.sources["toy"] == "roofline"
        assert roof.compute_s == pytest.approx(before.compute_s + want, rel=1e-12)
        # measured: the suite's timing at the spec's size (a constant 1e12 B/s here)
        path = _toy_results(tmp_path, 1e12)
        timings = KernelTimings.from_paths([path], "h200", "--results")
        measured = pass_cost(MODEL, gpu, LENS, LAYOUT, backward=False, pricer=Pricer(gpu, DEFAULT, timings))
        assert measured.kernels["toy"] == pytest.approx(4 * size / 1e12, rel=1e-12)
        assert measured.sources["toy"] == f"{path}: ours (double)"
        # a what-if speedup of the new family
        fast = pass_cost(MODEL, gpu, LENS, LAYOUT, backward=False,
                         pricer=Pricer(gpu, DEFAULT, timings, speedups={"toy": 2.0}))
        assert fast.kernels["toy"] == pytest.approx(2 * size / 1e12, rel=1e-12)
    with pytest.raises(PolytraceError, match="toy=2: unknown kernel family"):
        check_speedups({"toy": 2})


def test_the_toy_family_is_a_part_of_every_trainer_stage_of_an_estimate():
    from polytrace.stepmodel import estimate

    kw = dict(profile="dapo-math-32b", model="qwen2.5-1.5b", gpu="h200", gpus=1, steps=[0], prompts=8)
    with families.registered(TOY):
        res = estimate(**kw)
    kernels = res.summary["kernels"]
    toy = {stage: fams["toy"]["s"] for stage, fams in kernels.items() if "toy" in fams}
    assert sorted(toy) == ["old_log_prob", "ref", "update_actor"]  # trainer passes; not the rollout
    assert all(t > 0 for t in toy.values())
    summary = res.summary["families"]["toy"]
    assert summary["status"] == "roofline" and summary["s"] == pytest.approx(sum(toy.values()), rel=1e-9)
    assert "toy" not in estimate(**kw).summary["families"]


# --- benchmarked and gated -----------------------------------------------------------------------
SESSION = '''
import _toy_family.cases as toy_cases
from suites import registry

registry.SUITES["toy"] = (toy_cases,)  # the suites registry line a real family adds
test_double = registry.make_test(registry.suite_cases("toy"), "test_double")
'''


def test_the_toy_family_is_benchmarked_by_the_suites_and_compared_by_the_gate(tmp_path):
    from polytrace.measure.results.gate import GatePolicy, compare
    from polytrace.measure.results.schema import load_result

    (tmp_path / "test_toysuite.py").write_text(SESSION)
    out = tmp_path / "base.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "POLYTRACE_BENCH_ROUNDS": "12",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    env.pop("POLYTRACE_BENCH_BUDGET_S", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suites.conftest", "-p", "no:cacheprovider",
                           str(tmp_path / "test_toysuite.py"), f"--benchmark-json={out}", "--benchmark-save-data",
                           "--rootdir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    data = json.loads(out.read_text())
    ids = sorted((b["extra_info"]["provider"], b["extra_info"]["shape"]["T"]) for b in data["benchmarks"])
    assert ids == [("ours", 64), ("ours", 256), ("torch", 64), ("torch", 256)]
    for b in data["benchmarks"]:
        info = b["extra_info"]
        assert info["family"] == "toy" and info["check"]["ok"] is True and info["check"]["rule"] == "exact copy"
        assert info["bytes_moved"] == toy_spec.double_bytes(info["shape"]["T"], 16)
        assert len(b["stats"]["data"]) == 12
    # the candidate: our toy kernel 30% slower at T=256, everything else the same rounds
    slow = copy.deepcopy(data)
    for b in slow["benchmarks"]:
        if b["extra_info"]["provider"] == "ours" and b["extra_info"]["shape"]["T"] == 256:
            b["stats"]["data"] = [x * 1.3 for x in b["stats"]["data"]]
            b["stats"]["median"] *= 1.3
    cand = tmp_path / "cand.json"
    cand.write_text(json.dumps(slow))
    report = compare(load_result(out), load_result(cand), policy=GatePolicy(allow_cpu=True))
    got = {(c.family, c.kernel, c.provider, c.shape_id.split(",")[0]): c for c in report.comparisons}
    assert sorted(got) == [("toy", "double", p, f"T={t}") for p in ("ours", "torch") for t in (256, 64)]
    slowed = got[("toy", "double", "ours", "T=256")]
    # CPU rounds are noisy: the verdict on the slowed kernel is a regression or too few rounds to
    # say, never "unchanged"; the medians' ratio is exact
    assert slowed.gated and slowed.change == pytest.approx(0.3, rel=1e-9)
    assert slowed.status in ("regression", "inconclusive")
    for c in got.values():
        assert c.gated == (c.provider == "ours")
        if c is not slowed:
            assert c.change == 0.0 and c.status in ("unchanged", "inconclusive")
    assert report.exit_code in (1, 3)  # a regression or undecided: never a pass
