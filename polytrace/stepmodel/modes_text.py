"""Text of the execution-mode estimates: per-step tables, utilisation, idle time by cause and the
side-by-side comparison (``polytrace estimate --mode`` / ``--compare-modes``)."""

from __future__ import annotations

from ..wording import counted
from .engines import engine_phrase
from .stages import STAGES

# What each idle figure of ``summary.mode.idle_gpu_s`` counts, in the order printed.
IDLE_CAUSES = {
    "rollout_tail_gpu_s": "rollout tail: decoding with under half the peak batch (busy, mostly weights)",
    "rollout_engines_waiting_for_slowest_gpu_s": "rollout engines idle, waiting for the slowest engine",
    "rollout_waiting_for_trainer_gpu_s": "rollout GPUs idle, waiting for the trainer (staleness bound, sync)",
    "trainer_waiting_for_rollout_gpu_s": "trainer GPUs idle, waiting for samples or the rollout's drain",
    "trainer_ranks_waiting_for_slowest_gpu_s": "trainer ranks idle, waiting for the slowest rank",
    "weight_sync_gpu_s": "GPUs stalled by the weight sync (all of them, or the trainer's under in-flight updates)",
    "reward_scoring_gpu_s": "all GPUs idle during reward scoring (colocated)",
}


def idle_lines(summary: dict) -> list[str]:
    """GPU time by cause per step: GPU-seconds and share of (step time x GPUs)."""
    mode = summary["mode"]
    n = mode["rollout_gpus"] + (mode["train_gpus"] if mode["mode"] != "sync" else 0)
    gpu_s = summary["mean_step_s"] * n
    out = [f"GPU time per step by cause (estimated; {gpu_s:,.0f} GPU-s per step on {counted(n, 'GPU')}):"]
    for key, what in IDLE_CAUSES.items():
        v = mode["idle_gpu_s"].get(key)
        if v is None:
            continue
        out.append(f"  {what}: {v:,.0f} GPU-s ({v / gpu_s:.1%})" if gpu_s else f"  {what}: 0")
    return out


def stream_settings(m: dict) -> str:
    """A fully-async estimate's settings in one phrase (``summary.mode``): staleness, what happens
    at a sync (in-flight updates, or partial rollout on / off) and local updates per sync."""
    at_sync = ("in-flight updates" if m.get("in_flight_updates")
               else f"partial rollout {'on' if m['partial_rollout'] else 'off'}")
    n = m["updates_per_sync"]
    return f"staleness {m['staleness']:g}, {at_sync}, {n} update{'' if n == 1 else 's'} per sync"


def mode_lines(res) -> list[str]:
    """The text of a separated-mode estimate (one-step-off, fully-async)."""
    from tabulate import tabulate

    s, m = res.summary, res.summary["mode"]
    c = res.config
    head = (f"{res.profile} | {c['model']} | {m['mode']} | rollout {m['rollout_gpus']} x {c['gpu']} "
            f"(TP {m['rollout_tp']}) : trainer {m['train_gpus']} x {c['gpu']} ({m['split']}) | "
            f"{engine_phrase(c['eager'], c['engine'], c['async_scheduling'])} | "
            f"{c['algorithm']} | {c['prompts_per_step']} prompts x {c['n']}")
    if m["mode"] == "fully-async":
        head += f" | {stream_settings(m)}"
    lines = [head, f"source: {res.source}"]
    stages = [st for st in STAGES if any(r["stages_s"][st] > 0 for r in res.rows)]
    table = [[r["step"], *(f"{r['stages_s'][st]:.1f}" for st in stages), f"{r['weight_sync_s']:.2f}",
              f"{r['step_s']:.1f}", f"{r['tokens_per_s_per_gpu']:.0f}", f"{r['busy']['rollout']:.0%}",
              f"{r['busy']['trainer']:.0%}"] for r in res.rows]
    lines.append(tabulate(table, headers=["step", *(f"{st} s" for st in stages), "weight sync s", "step s",
                                          "tok/s/GPU", "rollout busy", "trainer busy"]))
    lines.append(f"gen: the rollout's seconds per batch on its {counted(m['rollout_gpus'], 'GPU')} "
                 + ("(one batch, long tail included); the step is max(gen, training + weight sync): the rollout "
                    "decodes on through the sync (in-flight updates)"
                    if m["mode"] == "one-step-off" and m.get("in_flight_updates") else
                    "(one batch, long tail included); the step is weight sync + max(gen, training)"
                    if m["mode"] == "one-step-off" else
                    "(streamed with full engines, decoding on through the sync: in-flight updates)"
                    if m["staleness"] > 0 and m.get("in_flight_updates") else
                    "(streamed with full engines)" if m["staleness"] > 0 else "(one batch per weight version)"))
    tried = ", ".join(f"{t['rollout_gpus']}:{t['train_gpus']} {t['step_s']:.0f} s" for t in m["splits_tried"])
    if m["split"] != "given":
        lines.append(f"splits tried (rollout:trainer, first sampled step): {tried}")
    ws = m["weight_sync"]
    # the routed experts handed over one tensor at a time (``refit.expert_tensor_seconds``)
    tensors = (f" + {ws['tensors']:.2f} s of expert tensors"
               + (" (checkpoint engine: bucketed)" if ws.get("checkpoint_engine") else "") if ws.get("tensors") else "")
    moved = (f"max(gather {ws['gather']:.2f}, broadcast {ws['broadcast']:.2f}) pipelined"  # gathered while sent
             if ws.get("pipelined") else f"gather {ws['gather']:.2f} + broadcast {ws['broadcast']:.2f}")
    lines.append(f"weight sync {m['weight_sync_s']:.2f} s per step: {moved} + load {ws['load']:.3f} s "
                 f"({ws['bytes'] / 1e9:.1f} GB){tensors}")
    lines += idle_lines(s)
    return lines


def compare_table(cmp, tablefmt: str = "simple") -> str:
    """The modes side by side (a ``result.ModeComparison``'s rows)."""
    from tabulate import tabulate

    rows = [[r["mode"], r["split"], f"{r['step_s']:.1f}", f"{r['speedup']:.2f}x", f"{r['gen_s']:.1f}",
             f"{r['train_s']:.1f}", f"{r['weight_sync_s']:.2f}", f"{r['rollout_busy']:.0%}",
             f"{r['trainer_busy']:.0%}"] for r in cmp.rows]
    return tabulate(rows, headers=["mode", "GPUs (rollout:trainer)", "step s", "vs sync", "gen s", "train s",
                                   "weight sync s", "rollout busy", "trainer busy"], tablefmt=tablefmt)


__all__ = ["IDLE_CAUSES", "compare_table", "idle_lines", "mode_lines", "stream_settings"]
