"""Shape statistics of a workload, for kernel and RL-infra engineers.

Per step (a ``Batch``):

- sequences, prompt groups, tokens per step (prompt + response) and response tokens,
- response-length mean, p50, p99, max; max/mean and p99/p50 ratios (how long the tail is),
- share of response tokens in the longest 10% of sequences,
- padding waste if the step were padded to its longest sequence (1 - real / padded tokens),
- rollout tail: if all sequences start decoding together, the share of decode iterations during
  which fewer than 10% of the batch is still generating (the GPU is mostly idle then),
- share of responses at the cap; for multi-turn: turns and tool calls per trajectory, tool
  latency per trajectory.
"""

from __future__ import annotations

import numpy as np

from .profiles.profile import Profile
from .trace.batch import Batch
from .trace.model import Trace, describe_cap

TAIL_ACTIVE_FRACTION = 0.10


def rollout_tail_share(response_lens: np.ndarray, active_fraction: float = TAIL_ACTIVE_FRACTION) -> float:
    """Share of decode iterations (one per token of the longest response) during which fewer
    than ``active_fraction`` of the sequences are still generating."""
    r = np.sort(np.asarray(response_lens))
    if r.size == 0 or r[-1] <= 0:
        return 0.0
    # At iteration t, sequences with length > t are active. Fewer than f*N are active once t
    # reaches the length of the sequence at rank N - ceil(f*N) (0-based, ascending).
    k = int(np.ceil(active_fraction * r.size))
    threshold = r[r.size - k] if k <= r.size else 0
    # active(t) = #(r > t) < k  <=>  t >= r[N-k]  (for t < max)
    return float((r[-1] - threshold) / r[-1])


def describe_batch(b: Batch) -> dict:
    r = b.response_lens.astype(np.float64)
    seq = b.seq_lens.astype(np.float64)
    n = r.size
    out = {"step": b.step, "sequences": n, "groups": b.n_groups, "tokens": int(seq.sum()),
           "response_tokens": int(r.sum())}
    if n == 0:
        return out
    sr = np.sort(r)[::-1]
    top = max(1, int(np.ceil(0.10 * n)))
    out.update({
        "response_mean": float(r.mean()), "response_p50": float(np.percentile(r, 50)),
        "response_p99": float(np.percentile(r, 99)), "response_max": float(r.max()),
        "prompt_mean": float(b.prompt_lens.mean()),
        "max_over_mean": float(r.max() / r.mean()),
        "p99_over_p50": float(np.percentile(r, 99) / max(np.percentile(r, 50), 1.0)),
        "top10pct_token_share": float(sr[:top].sum() / sr.sum()),
        "padding_waste": float(1.0 - seq.sum() / (n * seq.max())),
        "rollout_tail_share": rollout_tail_share(r),
        "cap_share": float(b.capped.mean()),
    })
    if b.turns is not None:
        out["turns_per_trajectory"] = float(len(b.turns) / n)
        out["tool_calls_per_trajectory"] = float(b.turns.tool_calls_per_sequence(n).mean())
        out["tool_latency_s_per_trajectory"] = float(b.turns.tool_latency_s.sum() / n)
        if b.loss_lens is not None:
            out["loss_token_share"] = float(b.loss_lens.sum() / max(r.sum(), 1))
    return out


SUMMARY_KEYS = ("sequences", "tokens", "response_mean", "response_p50", "response_p99", "response_max",
                "max_over_mean", "p99_over_p50", "top10pct_token_share", "padding_waste", "rollout_tail_share",
                "cap_share", "turns_per_trajectory", "tool_calls_per_trajectory", "tool_latency_s_per_trajectory")


def describe(source: Profile | Trace, steps=None, seed: int = 0, include_partial: bool = False) -> dict:
    """Per-step statistics and their mean over steps. A profile is sampled at ``steps``
    (default 0-7); a trace uses its recorded steps. A trace's partial steps (``Trace.partial_flags``:
    a fragment such as 47 of 2,048 trajectories) are flagged (``partial`` in their rows,
    ``partial_steps`` in the result) and left out of the means unless ``include_partial``."""
    if isinstance(source, Profile):
        steps = list(range(8)) if steps is None else list(steps)
        batches = (source.sample(step=s, seed=seed) for s in steps)  # one step in memory at a time
        head = {"kind": "profile", "name": source.name, "description": source.description,
                "config": source.config.to_json(), "seed": seed,
                "drift": source.drift.name if source.drift is not None else "none"}
        partial = [False] * len(steps)
    else:
        batches = (s.to_batch(source.max_response_len) for s in source.steps)
        partial = source.partial_flags()
        head = {"kind": "trace", "name": source.name, "source": source.source,
                "max_response_len": source.max_response_len, "cap_source": source.cap_source,
                "typical_step_responses": source.typical_step_size(), "include_partial": bool(include_partial)}
    rows = [describe_batch(b) for b in batches]
    if head["kind"] == "trace":
        for row, is_partial in zip(rows, partial):
            row["partial"] = is_partial
        head["partial_steps"] = [r["step"] for r, is_partial in zip(rows, partial) if is_partial]
    used = [r for r, is_partial in zip(rows, partial) if include_partial or not is_partial]
    summary = {}
    for k in SUMMARY_KEYS:
        vals = [r[k] for r in used if k in r]
        if vals:
            summary[k] = float(np.mean(vals))
    return {**head, "steps": [r["step"] for r in rows], "summary": summary, "per_step": rows}


def partial_note(partial_steps: list[int], sizes: list[int], typical: int, included: bool) -> str:
    """One line naming the partial steps (with their response counts) and what was done with them
    ("" when there are none)."""
    if not partial_steps:
        return ""
    parts = ", ".join(f"step {s} ({n:,} responses)" for s, n in zip(partial_steps, sizes))
    verb = "is" if len(partial_steps) == 1 else "are"
    what = "kept in the statistics (--include-partial)" if included else \
        "left out of the statistics (--include-partial keeps them)"
    return f"note: {parts} {verb} partial (the median step has {typical:,}): {what}"


_LABELS = [
    ("sequences", "sequences per step", "{:.0f}"),
    ("tokens", "tokens per step (prompt + response)", "{:,.0f}"),
    ("response_mean", "response length, mean", "{:,.0f}"),
    ("response_p50", "response length, p50", "{:,.0f}"),
    ("response_p99", "response length, p99", "{:,.0f}"),
    ("response_max", "response length, max", "{:,.0f}"),
    ("max_over_mean", "max / mean response", "{:.2f}"),
    ("p99_over_p50", "p99 / p50 response", "{:.2f}"),
    ("top10pct_token_share", "token share of the longest 10%", "{:.1%}"),
    ("padding_waste", "padding waste if padded to batch max", "{:.1%}"),
    ("rollout_tail_share", "rollout tail (decode iters with <10% active)", "{:.1%}"),
    ("cap_share", "responses at the cap", "{:.2%}"),
    ("turns_per_trajectory", "turns per trajectory", "{:.2f}"),
    ("tool_calls_per_trajectory", "tool calls per trajectory", "{:.2f}"),
    ("tool_latency_s_per_trajectory", "tool latency per trajectory (s)", "{:.2f}"),
]


def workload_table_rows(summary: dict) -> list[list[str]]:
    return [[label, fmt.format(summary[key])] for key, label, fmt in _LABELS if key in summary]


def format_describe(result: dict, per_step: bool = False) -> str:
    from tabulate import tabulate

    head = f"{result['kind']} {result['name']}"
    if result["kind"] == "profile":
        c = result["config"]
        head += (f": {c['prompts_per_step']} prompts x {c['n']}, max response {c['max_response_len']}, "
                 f"drift {result['drift']}, steps {_compact(result['steps'])}, seed {result['seed']} (sampled)")
    else:
        head += (f": {result['source']}, {len(result['steps'])} steps (recorded), "
                 f"{describe_cap(result['max_response_len'], result.get('cap_source', 'recorded'))}")
    lines = [head]
    note = partial_note(result.get("partial_steps") or [],
                        [r["sequences"] for r in result["per_step"] if r.get("partial")],
                        result.get("typical_step_responses", 0), result.get("include_partial", False))
    if note:
        lines.append(note)
    lines += ["", tabulate(workload_table_rows(result["summary"]), headers=["statistic (mean over steps)",
                                                                               "value"])]
    if per_step:
        # plain numbers: counts with thousands separators, shares as percentages (``.3g`` printed
        # a p99 of 9,380 tokens as 9.38e+03)
        columns = [("sequences", "sequences", _count), ("tokens", "tokens", _count),
                   ("response_mean", "resp mean", _count), ("response_p99", "resp p99", _count),
                   ("response_max", "resp max", _count), ("padding_waste", "padding waste", _share),
                   ("rollout_tail_share", "rollout tail", _share)]
        rows = [[f"{r['step']} (partial)" if r.get("partial") else r["step"]]
                + [fmt(r[k]) if k in r else "" for k, _, fmt in columns] for r in result["per_step"]]
        lines += ["", tabulate(rows, headers=["step", *(h for _, h, _ in columns)], disable_numparse=True,
                               colalign=("right",) * (len(columns) + 1))]
    return "\n".join(lines)


def _count(v) -> str:
    return f"{v:,.0f}"


def _share(v) -> str:
    return f"{100 * v:.1f}%"


def _compact(steps: list[int]) -> str:
    if len(steps) > 2 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    return ",".join(str(s) for s in steps)
