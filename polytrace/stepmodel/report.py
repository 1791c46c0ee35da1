"""Pieces of ``polytrace report`` owned by the composition layer: the per-step stage estimates of a
profile and a plot of their breakdown."""

from __future__ import annotations

from .estimate import IDLE_FIGURES, estimate
from .stages import STAGES

_COLORS = {"gen": "#4c72b0", "old_log_prob": "#55a868", "ref": "#8172b2", "values": "#ccb974",
           "update_critic": "#64b5cd", "update_actor": "#c44e52", "other": "#999999"}


AMDAHL_FACTOR = 2.0  # the report's "this kernel family 2x faster -> step Y% faster" table


def report_section(profile_name, model, gpu, gpus: int, steps=range(0, 10), seed: int = 0, **kw) -> dict:
    """Per-step stage estimates (``rows``: one dict per step with ``step``, each stage's seconds,
    ``step_s``, ``tokens_per_s_per_gpu`` and idle shares), the ``summary`` (with the kernel
    breakdown and the Amdahl table), ``memory`` and ``warnings`` of ``estimate``."""
    kw.setdefault("amdahl", AMDAHL_FACTOR)
    res = estimate(profile_name, model, gpu, gpus, steps=steps, seed=seed, **kw)
    rows = []
    for r in res.rows:
        row = {"step": r["step"], **{s: r["stages_s"][s] for s in STAGES}, "step_s": r["step_s"],
               "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
               **{key: r["idle"][key] for key in IDLE_FIGURES}}
        rows.append(row)
    # "warnings": setups that run only with help the estimate does not price (see memory.py);
    # "memory": the per-GPU memory breakdown and KV-cache capacity of ``estimate``
    return {"profile": res.profile, "config": res.config, "source": res.source, "rows": rows,
            "summary": res.summary, "memory": res.memory, "warnings": res.warnings}


def stage_breakdown_figure(rows: list[dict], title: str = ""):
    """A stacked bar per step of the stage seconds in ``rows`` (from ``report_section``); the legend
    sits in its own band below the axes, so it never hides a bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in STAGES if any(r.get(s, 0) > 0 for r in rows)]
    # steps as categories, one slot each: steps 0,50,100 on a numeric axis were hairlines 50 apart,
    # and one step was a single bar filling the axis
    xs = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(8, 4.4))
    bottom = [0.0] * len(rows)
    for s in stages:
        vals = [r.get(s, 0.0) for r in rows]
        ax.bar(xs, vals, width=0.6, bottom=bottom, label=s, color=_COLORS.get(s))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(xs, [str(r["step"]) for r in rows])
    ax.set_xlim(-0.5 - 0.5 * (len(rows) < 3), len(rows) - 0.5 + 0.5 * (len(rows) < 3))
    ax.set_xlabel("step")
    ax.set_ylabel("seconds (estimated)")
    ax.set_title(title or "Estimated RL step time by stage", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", fontsize=8, ncol=max(1, len(stages)),
               frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # the bottom 7% is the legend's band
    return fig


def plot_stage_breakdown(rows: list[dict], path, title: str = "") -> str:
    """``stage_breakdown_figure`` written as PNG."""
    import matplotlib.pyplot as plt

    fig = stage_breakdown_figure(rows, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)
