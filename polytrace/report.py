"""``polytrace report``: the main job.

For one profile (default ``dapo-math-32b``), model and GPU it writes ``report.md`` with

1. the workload's shape statistics (sampled steps, mean over steps),
2. the estimated RL step: per-stage times, step time, tokens/s/GPU and where the time goes
   (from ``polytrace.compose``), with a PNG of the stage breakdown across steps,
3. links to the measured kernel results and plots found under ``results/``,

and prints the same tables. It runs in seconds on a CPU: nothing here touches a GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cli._io import atomic_write_text
from .errors import PolytraceError

DEFAULT_GPU = "h200"
DEFAULT_STEPS = tuple(range(8))


def _results_root() -> Path:
    env = os.environ.get("POLYTRACE_RESULTS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "results"


def build_report(profile=None, model=None, gpu=None, gpus=None, steps=None, seed: int = 0,
                 output_dir: str | os.PathLike = "polytrace-report") -> dict:
    from tabulate import tabulate

    from .cli.workload_cmds import format_describe, workload_table_rows
    from .describe import describe
    from .profiles import DEFAULT_PROFILE, get_profile

    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise PolytraceError(f"--output-dir {out}: exists and is not a folder")
    prof = get_profile(profile or DEFAULT_PROFILE)
    steps = list(steps) if steps is not None else list(DEFAULT_STEPS)
    gpu = gpu or DEFAULT_GPU
    workload = describe(prof, steps=steps, seed=seed)

    from .compose import plot_stage_breakdown, report_section

    estimate = report_section(prof.name, model=model, gpu=gpu, gpus=gpus, steps=steps, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    plot_path = out / "stage_breakdown.png"
    plot_stage_breakdown(estimate["rows"], plot_path)
    hist_path = out / "response_lengths.png"
    _plot_lengths(prof, steps, seed, hist_path)

    from .results import report_links

    links = report_links(_results_root())

    text_parts = [format_describe(workload), "", estimate["text"]]
    md = [f"# polytrace report: {prof.name}", "",
          f"{prof.description}", "",
          f"Sampled from the `{prof.name}` profile at steps {steps[0]}-{steps[-1]}, seed {seed} "
          f"({prof.source}). Step times are **estimates** from `polytrace.compose` "
          f"({estimate.get('basis', 'roofline model')}), not measurements.", "",
          "## Workload shape (mean over sampled steps)", "",
          tabulate(workload_table_rows(workload["summary"]), headers=["statistic", "value"], tablefmt="github"),
          "", f"![response lengths]({hist_path.name})", "",
          "## Estimated RL step", "", estimate["markdown"], "",
          f"![stage breakdown across steps]({plot_path.name})", ""]
    md += ["## Measured kernel results", ""]
    if links:
        for title, path in links:
            rel = os.path.relpath(path, out.resolve()) if Path(path).is_absolute() else path
            md.append(f"- [{title}]({rel})")
    else:
        md.append("No measured results under results/ yet (run scripts/device_check.sh on a GPU).")
    md.append("")
    report_path = out / "report.md"
    atomic_write_text(report_path, "\n".join(md))
    text_parts += ["", f"wrote {report_path} (with {plot_path.name}, {hist_path.name})"]
    return {"text": "\n".join(text_parts), "path": str(report_path),
            "data": {"workload": workload, "estimate": estimate.get("data", estimate["rows"]),
                     "report": str(report_path), "links": [list(x) for x in links]}}


def _plot_lengths(profile, steps, seed, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    lens = np.concatenate([profile.sample(step=s, seed=seed).response_lens for s in steps])
    bins = np.unique(np.geomspace(1, max(lens.max(), 2), 60).astype(int))
    ax.hist(lens, bins=bins, color="#4477aa")
    ax.set_xscale("log")
    ax.set_xlabel("response length (tokens)")
    ax.set_ylabel("responses")
    ax.axvline(profile.config.max_response_len, color="#cc3311", ls="--", lw=1, label="length cap")
    ax.set_title(f"{profile.name}: sampled response lengths, steps {steps[0]}-{steps[-1]}")
    ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
