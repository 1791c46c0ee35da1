"""Zero-shot estimates of other frameworks' published reference runs (``published_runs.py``:
NeMo RL's GRPO performance tables, 8B dense to 671B MoE, on-policy and one-step-off, and verl's
DeepSeek-V3 benchmark).

Each run is estimated from what its documentation states (model, GPUs, batch in responses, average
length and cap, parallel layout, mode), with lengths stated by their mean (``--lengths``), no
calibration and no measured timings: the shared physical priors (``polytrace/data/priors.json``) as
``polytrace estimate`` and ``report`` apply them by default. Goals: within 30% of the published step
time on at least three quarters of the runs, none off by more than 2x, asserted on the rows no
constant was derived from (``published_runs.ASSERTED``; the NeMo RL MoE rows of ``DERIVED_FROM``
carry the per-expert-tensor refit price that NeMo RL's own refits set: scored in the table, not
asserted). The runs the model misses are marked with the physical reason; the table is printed in
docs/step-model.md ("Published reference runs").
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from published_runs import ASSERTED, DERIVED_FROM, RUNS, SOURCE, TABLES, estimate_run

pytestmark = pytest.mark.filterwarnings("ignore")

WITHIN = 0.30
# The GB200 misses are MoE runs: the four dense GB200 runs (Llama-3.1-8B and Qwen3-32B, v0.5 table)
# are within 17% at the same datasheet prices, so what these runs lack is no Blackwell efficiency in
# general but something their MoE engines or trainers pay there that no corpus log measures. One
# named cause: vLLM's fused-MoE Triton kernel falls back to an untuned default configuration on a
# device without a tuned config file (vllm-project/vllm issue #27496, 2025-10: "qwen30ba3 on gh200
# and gb200 is super slow", E=128,N=768 missing for the GH200); others: all-to-all kernels before
# HybridEP (NVIDIA-NeMo/RL pull request #4118 enabled it in the GB200 MoE recipes later) and engines
# spanning 4-GPU trays.
GB200_MOE = "the GB200 MoE runs' shortfall: the dense GB200 runs are within 17% (module comment)"
# Runs the zero-shot model misses by more than WITHIN, and why. A physical reason each, never a
# factor fitted to the row. Entries of DERIVED_FROM rows explain the table's scored misses; no test
# marks them (those rows are not asserted).
MISSES = {
    "qwen3-30b-a3b 1-step-off": (
        "1.36x (207 s under the priors refit at ef0b374; 1.43x, 217 s, before; 1.40x, 213 s, under the nine-log "
        "priors; generation-bound: 213 s on 8 TP2 engines of 256 "
        "responses each, where the published 152 s "
        "step bounds it): ~90 s of it is per-sequence host work at the corpus's price (109 us a sequence an "
        "iteration, fitted on vLLM 0.6-0.8 engines: V0 on the 0.5B logs, V1 0.8.x in eager mode on the 7B ones); "
        "NeMo RL v0.6 runs vLLM 0.17.1, which no corpus log measures (on-policy, 128 responses an engine: 1.17x); "
        "not its asynchronous scheduling, which vLLM 0.17.1 turns off for these TP2 engines on Ray's executor; "
        "one vLLM 0.11 run outside the corpus (esaaren/verl-on-gke) bounds the price at 56-93 us by its slowest "
        "request's latency, an upper bound, not applied (docs/step-model.md)"),
    "gb200 llama3.1-8b 1-step-off": (
        "1.39x (99 s against 71.1 s; 1.26x under the nine-log priors): the 22-log priors price the rollout's host "
        "work per sequence at 9.6x its base (7.3x before), fitted on vLLM 0.6-0.8 engines; the same run on-policy "
        "is at 1.17x and on DGX-H100 at 1.19x"),
    "gb200 deepseek-v3 on-policy 128": (
        "0.63x (68 s against 108 s): as on the H100s (within 30% there under the 22-log priors, 0.68x before), "
        "and " + GB200_MOE),
    "gb200 deepseek-v3 on-policy 256": "0.59x (58 s against 98.7 s): as on 128 GB200s",
    "gb200 qwen3-235b on-policy 128": (
        "0.52x (180 s): the published step is slower on 128 GB200s than on 64 (345 against 286 "
        "s, where the model is at 1.11x) and barely faster than 128 H100s (395 s), where the model, priced at "
        "Blackwell's datasheet rates (2.5x an H100's bf16, 2.4x its HBM) with the efficiencies fitted on A100/H100 "
        "logs, scales with the GPUs; " + GB200_MOE),
    "gb200 qwen3-235b 1-step-off": (
        "0.62x (172 s against 278 s published, slower than the H100 table's 231 s on twice the GPUs): " + GB200_MOE),
    "gb200 qwen3-30b-a3b 1-step-off": (
        "0.58x (176 s against 301 s, published slower than the same run on-policy, 221 s, where the model is at "
        "0.85x): the table's trainer layout (EP 16 on the 8 trainer GPUs) is not the recipe's (EP 8, priced); "
        + GB200_MOE),
}
# The one-step-off Llama-3.1-8B rows (recompute on, as their recipe sets it) since the separated
# modes apply the priors of the run's recompute setting (issue 35; they applied recompute off's
# whatever the run said, and these rows were generation-bound at 1.16x and 1.17x).
_RECOMPUTE = ("the priors' recompute slowdown is fitted on verl FSDP logs; NeMo RL trains with Megatron's "
              "activation checkpointing, which no corpus log measures")
MISSES["llama3.1-8b 1-step-off"] = (
    "1.37x (88.5 s against 64.8 s): trainer-bound in the model, 88 s of training on its 8 GPUs (update 60.7 s "
    "at the recompute prior; 69.8 s of training at recompute off's) where the published step bounds it at "
    "64.8 s; the same recipe on-policy on 16 GPUs is at 1.15x (update 30.8 s): " + _RECOMPUTE)
MISSES["gb200 llama3.1-8b 1-step-off"] = (
    "1.32x (93.6 s against 71.1 s): trainer-bound, 93.6 s of training on 4 GB200s (79.7 s at recompute off's "
    "prior) where the published step bounds it; on-policy on 8 GB200s 1.10x: " + _RECOMPUTE)
MISSES["verl deepseek-v3 on-policy 96"] = (
    "0.43x (731 s against 1,700 s under the 22-log priors refit at ef0b374; 0.48x, 808 s, before it; 0.35x, 603 s, "
    "under the nine-log priors, generation 338 s "
    "against the published 1,050 s, the rest 265 s against 650 s): "
    "not explained. verl's one published step time, on 96 H20s at the settings the page recommends: vLLM 0.8.5 "
    "decoding DeepSeek-V3 in eager mode at TP 32 across 4 nodes (3 engines of 256 responses, KV cache for ~92 "
    "at once), a trainer with its parameters, gradients and reference offloaded between stages and AdamW in CPU "
    "memory. No corpus log has an eager MoE engine spanning nodes or a CPU optimizer; candidates the model "
    "prices at dense-model rates: an MLA + MoE layer's ~3x the kernel launches of a dense one in eager mode, "
    "TP 32's per-layer all-reduces across InfiniBand without CUDA graphs, the offload traffic of 7B parameters a "
    "GPU")
# Of MISSES, the runs off by more than 2x: verl's DeepSeek-V3 run (the refit's expert tensors,
# priced, brought five NeMo RL runs inside 2x: the colocated DeepSeek-V3 runs at 0.26-0.49x and
# Qwen3-235B on 128 GB200s at 0.45x).
OFF_2X: tuple[str, ...] = ("verl deepseek-v3 on-policy 96",)
H100 = [r for r in ASSERTED if r.gpu == "h100"]


@pytest.fixture(scope="module")
def estimates():
    return {run.name: estimate_run(run) for run in RUNS}


def _ratio(estimates, run) -> float:
    return estimates[run.name].summary["mean_step_s"] / run.step_s


def _case(run):
    marks = [pytest.mark.xfail(strict=True, reason=MISSES[run.name])] if run.name in MISSES else []
    return pytest.param(run, marks=marks, id=run.name.replace(" ", "-"))


def test_the_table_spans_what_the_goal_asks():
    from polytrace.run.models import get_model

    active = [get_model(r.model).params_active for r in RUNS]
    assert min(active) < 10e9 and max(get_model(r.model).params_total for r in RUNS) > 200e9
    assert {r.mode for r in RUNS} == {"sync", "one-step-off", "fully-async"}
    assert any(get_model(r.model).experts and r.train_ep > 1 for r in RUNS) and any(r.train_cp > 1 for r in RUNS)
    assert "github.com/NVIDIA-NeMo/RL" in SOURCE and {r.framework for r in RUNS} == {"nemo-rl", "verl"}
    assert all(r.table in TABLES and re.search(r"read 2026-12-0[12]\)", TABLES[r.table]) for r in RUNS)
    assert {r.table for r in RUNS} == set(TABLES) and any(r.fp8 for r in RUNS)


@pytest.mark.parametrize("run", [_case(r) for r in ASSERTED])
def test_zero_shot_step_within_30pct(estimates, run):
    ratio = _ratio(estimates, run)
    assert abs(ratio - 1) <= WITHIN, (run.name, ratio)


def _case_2x(run):
    marks = [pytest.mark.xfail(strict=True, reason=MISSES[run.name])] if run.name in OFF_2X else []
    return pytest.param(run, marks=marks, id=run.name.replace(" ", "-"))


@pytest.mark.parametrize("run", [_case_2x(r) for r in ASSERTED])
def test_no_run_off_by_more_than_2x(estimates, run):
    assert 0.5 <= _ratio(estimates, run) <= 2.0, (run.name, _ratio(estimates, run))


def test_three_quarters_within_30pct_on_h100(estimates):
    """The DGX-H100 tables' asserted rows (the dense runs): the GPUs the priors' corpus ran on (A100
    and H100). 5 of 6 within 30% (the one-step-off Llama-3.1-8B run at 1.34x: MISSES)."""
    close = [r.name for r in H100 if abs(_ratio(estimates, r) - 1) <= WITHIN]
    assert len(H100) >= 6 and len(close) >= 0.75 * len(H100), close


@pytest.mark.xfail(strict=True, reason="8 of the 11 asserted rows within 30% (73%): verl's DeepSeek-V3 run (0.43x) "
                   "and the one-step-off Llama-3.1-8B rows at recompute's prior (1.34x H100, 1.32x GB200): MISSES; "
                   "with the 18 DERIVED_FROM rows (13 of them within 30%, scored, not asserted) 21 of 29")
def test_three_quarters_within_30pct_every_table(estimates):
    close = [r.name for r in ASSERTED if abs(_ratio(estimates, r) - 1) <= WITHIN]
    assert len(close) >= 0.75 * len(ASSERTED), close


def test_the_rows_a_constant_came_from_are_scored_not_asserted(estimates):
    """DERIVED_FROM is exactly the NeMo RL rows whose step pays the per-expert-tensor refit price
    (issue 36: no constant tested against the rows it was derived from): colocated through the
    refit, separated through the weight sync. A MoE row left asserted, or a dense one excluded,
    fails here."""
    from polytrace.run.models import get_model
    from polytrace.stepmodel.refit import expert_tensor_seconds

    def pays(run):
        if run.mode == "sync":
            return expert_tensor_seconds(get_model(run.model)) > 0
        return estimates[run.name].summary["mode"]["weight_sync"]["tensors"] > 0

    assert {r.name for r in RUNS if r.framework == "nemo-rl" and pays(r)} == set(DERIVED_FROM)
    assert len(DERIVED_FROM) == 18 and len(ASSERTED) == len(RUNS) - 18
    assert not set(DERIVED_FROM) & {r.name for r in ASSERTED}


def test_the_layouts_reach_the_estimate(estimates):
    """What the table states is what was priced: batch, layout and lengths."""
    for run in RUNS:
        res = estimates[run.name]
        c = res.config
        assert c["prompts_per_step"] * c["n"] == run.responses_per_step
        assert c["mini_batches"] == run.responses_per_step // run.train_batch
        assert (c["train_tp"], c["train_pp"], c["train_cp"], c["train_ep"]) == (
            run.train_tp, run.train_pp, run.train_cp, run.train_ep)
        assert c["rollout_tp"] == run.rollout_tp
        # the recipe's gpu_memory_utilization sizes the KV cache (0.88 against 0.8 decides whether the
        # 235B one-step-off engines decode their 32 responses in one wave or two)
        assert c["mem_fraction"] == run.gen_memory and c["gpu"] == res.gpu["slug"]
        assert res.gpu["slug"] == {"gb200": "gb200", "h100": "h100-sxm", "h20": "h20"}[run.gpu]
        # the FP8 tables' runs generate and train in FP8, the others in bf16
        want = "fp8" if run.fp8 else "bf16"
        assert c["rollout_precision"] == c["train_precision"] == want, run.name
        if run.mode == "sync":  # the colocated rows carry the sampled batch's token counts
            tokens = sum(r["response_tokens"] for r in res.rows) / sum(r["sequences"] for r in res.rows)
            assert abs(tokens / run.response_mean - 1) <= 0.10, (run.name, tokens)
        elif run.mode == "one-step-off":  # NeMo RL's async GRPO: the rollout decodes through the sync, pipelined
            m = res.summary["mode"]
            assert m["in_flight_updates"] is True and m["weight_sync"]["pipelined"] is True
            assert c["n"] == run.n and run.n in (16, 32)
        else:  # its K-step-off stream (K = 8): staleness K - 1, decoding through the sync, the step's whole
            # batch trained between syncs, the old policy's log-probs recomputed by the trainer
            m = res.summary["mode"]
            assert (m["mode"], m["staleness"], m["in_flight_updates"], m["updates_per_sync"]) == (
                "fully-async", 7.0, True, 1)
            assert (m["rollout_gpus"], m["train_gpus"]) == (64, 128) and m["weight_sync"]["pipelined"] is True
            assert res.summary["mean_stages_s"]["old_log_prob"] > 0


def test_the_verl_run_is_priced_with_its_scripts_settings(estimates):
    """verl's DeepSeek-V3 run: its script's settings reach the configuration (eager engine, the
    offloads, the CPU optimizer), and its lengths are the table's mean response under the
    script's response cap."""
    run = next(r for r in RUNS if r.framework == "verl")
    c = estimates[run.name].config
    assert c["eager"] is True and c["param_offload"] and c["optimizer_offload"] and c["ref_offload"]
    assert c["cpu_optimizer"] == 1.0 and c["cpu_optimizer_overlap"] is True
    assert c["max_response_len"] == 9632 and c["max_prompt_len"] == 2048 and c["micro_batch_tokens"] == 11680
    assert c["engine_weights_offload"] is False and c["switch_offload"] is False  # verl's colocated engine


def test_each_response_stops_where_its_prompt_leaves_the_sequence_cap():
    """The tables state the sequence cap (prompt and response: vLLM's max_model_len). A prompt
    shorter than the longest may write past what the longest leaves, never past the cap."""
    from polytrace.stepmodel.workloads import stated_lengths_profile

    run = next(r for r in RUNS if r.model == "deepseek-v3")
    prof = stated_lengths_profile(run.lengths(), model=run.model)
    b = prof.sample(step=0, seed=0, prompts=512)
    seq = b.prompt_lens + b.response_lens
    assert seq.max() <= run.max_seq and np.all(seq[b.capped] == run.max_seq)
    assert b.response_lens.max() > run.max_seq - prof.config.max_prompt_len


def test_the_docs_print_the_table_these_estimates_make():
    """docs/step-model.md's table is the one ``tests/published_runs.py`` prints at this commit: a
    change to the model that moves an estimate moves the docs with it."""
    from pathlib import Path

    from published_runs import markdown_table

    docs = (Path(__file__).resolve().parents[2] / "docs" / "step-model.md").read_text(encoding="utf-8")
    assert markdown_table() in docs
