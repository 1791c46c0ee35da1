#!/usr/bin/env python3
"""Re-derive the built-in profiles and drift presets from the public PolyTrace data.

    python scripts/fit_builtin_profiles.py ../shared

reads ``<shared>/polytrace-data`` and ``<shared>/validation-logs`` and writes
``polytrace/workload/profiles/data/*.json``: fitted parameters and quantile tables only, never the traces.
Deterministic: running it twice gives the same files.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from polytrace.workload.profiles.drift import drift_from_series  # noqa: E402
from polytrace.workload.profiles.fit import StatedBatch, fit_profile  # noqa: E402
from polytrace.workload.profiles.profile import BatchConfig, Profile  # noqa: E402
from polytrace.workload.trace import load_trace  # noqa: E402

OUT = ROOT / "polytrace" / "profiles" / "data"
PT = "Zhou-jiecheng/PolyTrace (arXiv 2509.25279)"

# name -> (trace folder under polytrace-data, stated caps, description). Caps not recorded in the
# traces come from the shared data's README (DAPO: max response 32768) and the recipes' published
# max prompt lengths (DAPO and DeepCoder: 2048).
TRACES = {
    "dapo-math-32b": ("verl/profile/packed_length_log/20260610_092349", dict(max_response_len=32768),
                      dict(max_prompt_len=2048),
                      "DAPO math, Qwen2.5-32B (verl + vLLM): long tail, p99/p50 ~ 6x"),
    "deepcoder-14b": ("rllm/profile/packed_length_log/20260616_024512", {}, dict(max_prompt_len=2048),
                      "DeepCoder code RL, 14B (rLLM): 15% of responses at the 16k cap"),
    "video-vl-7b": ("verl-video/profile/packed_length_log/20260609_033329", {}, {},
                    "Video QA GRPO, Qwen2.5-VL-7B: bimodal prompts (video tokens), short answers"),
    "search-r1-7b": ("search_r1/profile/multiturn_workload_log/0617_0223", {}, {},
                     "Search-R1 agent, Qwen2.5-7B: 1-5 turns, tool output inside the response"),
}


def fit_traces(data: Path) -> None:
    for name, (folder, load_kw, cfg_kw, desc) in TRACES.items():
        trace = load_trace(data / folder, **load_kw)
        profile = fit_profile(trace, name=name, description=desc,
                              source=f"fitted from PolyTrace {folder} ({PT})", batch=StatedBatch(**cfg_kw))
        (OUT / f"{name}.json").write_text(profile.dumps())
        print(f"{name}: {profile.fit_stats} config={profile.config}")


def fit_model_b(data: Path) -> None:
    dist = json.loads((data / "fitted/model_b_distribution_parameters.json").read_text())
    gmm = json.loads((data / "fitted/model_b_tooluse_gmm_parameters.json").read_text())
    math = dist["math_task"]["gmm_parameters"]
    # Batch settings are not recorded for Model B; 64 prompts x 16 is a common large-model GRPO
    # setting (override with ``prompts=``). Outputs were clipped at 32,000 when the GMM was fitted.
    profile = Profile(
        name="model-b-math",
        description="In-house 235B-class 'Model B' math (fitted GMM; batch size assumed)",
        kind="single", model="gmm",
        config=BatchConfig(prompts_per_step=64, n=16, max_prompt_len=2048, max_response_len=32000),
        params={"weights": math["weights"], "means": math["means"], "covariances": math["covariances"]},
        source=f"PolyTrace fitted/model_b_distribution_parameters.json math_task.gmm_parameters ({PT}); "
               f"385,024 samples")
    (OUT / "model-b-math.json").write_text(profile.dumps())

    tc = dist["tool_calling_task"]
    per_count = {}
    for k_str in tc["call_count_distribution"]:
        k = int(k_str)
        if k_str in gmm["tool_calling_task"]["sequence_models"]:
            m = gmm["tool_calling_task"]["sequence_models"][k_str]
            assert m["feature_names"][:2] == ["input_1", "output_1"], m["feature_names"]
            g = m["gmm_parameters"]
            per_count[k_str] = {"weights": g["weights"], "means": g["means"], "covariances": g["covariances"],
                                "source": "model_b_tooluse_gmm_parameters.json (Gaussian mixture)"}
        else:
            # Single Gaussian over the per-call features; reorder input_1..k, output_1..k to
            # the interleaved order input_1, output_1, ... used by the mixtures.
            m = tc["sequence_models"][k_str]
            names = m["feature_names"]
            order = [names.index(f"{kind}_{i}") for i in range(1, k + 1) for kind in ("input", "output")]
            mean = [m["mean_vector"][j] for j in order]
            cov = [[m["covariance_matrix"][a][b] for b in order] for a in order]
            per_count[k_str] = {"weights": [1.0], "means": [mean], "covariances": [cov],
                                "source": "model_b_distribution_parameters.json (single Gaussian)"}
    profile = Profile(
        name="model-b-tooluse",
        description="In-house 235B-class 'Model B' tool use: 1-10 calls (fitted GMMs; no latency)",
        kind="multiturn", model="tooluse",
        config=BatchConfig(prompts_per_step=64, n=16, max_prompt_len=4096, max_response_len=32000),
        params={"call_counts": tc["call_count_distribution"], "per_count": per_count,
                "feature_order": "interleaved"},
        source=f"PolyTrace fitted/model_b_*_parameters.json tool_calling_task ({PT})")
    (OUT / "model-b-tooluse.json").write_text(profile.dumps())
    print("model-b-math, model-b-tooluse written")


def drift_presets(logs: Path) -> None:
    log = logs / "verl_qwen2-7b_gpg_fsdp_8gpu_p1024_r1024.log"
    steps, means = [], []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"step:(\d+) - .*response_length/mean:([0-9.]+)", line)
        if m:
            steps.append(int(m.group(1)))
            means.append(float(m.group(2)))
    curve = drift_from_series(steps, means, "qwen2-7b-gpg", f"response_length/mean of {log.name} "
                              f"(public verl log, {len(steps)} steps), relative to its first 10 steps")
    presets = {"qwen2-7b-gpg": {k: v for k, v in curve.to_json().items() if k != "name"}}
    (OUT / "drift_presets.json").write_text(json.dumps({"presets": presets}, indent=1) + "\n")
    print(f"drift qwen2-7b-gpg: {curve.scale[0]} -> {curve.scale[-1]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fit_builtin_profiles.py SHARED_DIR")
    shared = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    drift_presets(shared / "validation-logs")
    fit_traces(shared / "polytrace-data")
    fit_model_b(shared / "polytrace-data")
