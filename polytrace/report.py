"""``polytrace report``: the main job.

For one profile (default ``dapo-math-32b``), model and GPU it writes ``report.md`` with

1. the workload's shape statistics (sampled steps, mean over steps),
2. the estimated RL step: per-stage times, step time, tokens/s/GPU and where the time goes
   (from ``polytrace.stepmodel``), with a PNG of the stage breakdown across steps,
3. links to the measured kernel results and plots found under ``results/``, apart from the
   compile-only reports (``results/static/``: compiled code, no timings),

and prints the same tables. It runs in seconds on a CPU: nothing here touches a GPU. With
``write=False`` (``report --json``) nothing is written.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from .atomic_write import atomic_write_text, first_missing
from .errors import PolytraceError
from .stepmodel.workloads import DEFAULT_GPU, DEFAULT_STEPS, default_workload


def _results_root() -> Path:
    env = os.environ.get("POLYTRACE_RESULTS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "results"


# `estimate` prices step 0 unless told; the report samples 8 steps so its plot shows the spread
# from step to step (dapo-math-32b on its default job: 107.7 s over steps 0-7 against 70.4 s at
# step 0, issue 38), and says so under its figures.
ESTIMATE_DEFAULT_STEPS = (0,)


def steps_text(steps) -> str:
    """The steps as given: ``step 5``, ``steps 0-7`` (a contiguous run), ``steps 0,50,100``."""
    from .workload.describe import _compact

    steps = list(steps)
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {_compact(steps)}"


def md_link(path: str) -> str:
    """A Markdown link target that survives spaces and non-ASCII letters (percent-encoded)."""
    return quote(str(path).replace(os.sep, "/"), safe="/.-_~")


@dataclass(frozen=True)
class ReportRun:
    """The run a report prices: a profile (None: the default one) with its model and GPU count
    unless given, on ``gpu`` (None: the default GPU)."""

    profile: str | None = None
    model: str | None = None
    gpu: str | None = None
    gpus: int | None = None


def build_report(run: ReportRun = ReportRun(), steps=None, seed: int = 0,
                 output_dir: str | os.PathLike = "polytrace-report", explain: bool = False,
                 roofline: bool = False, write: bool = True) -> dict:
    """The report: workload statistics and the step estimate, priced as ``polytrace estimate``
    prices it by default, with the shared physical priors (``roofline``: the base prices alone).
    ``write=False``: nothing is written (no folder, no files); the text and data are returned."""
    profile, model, gpu, gpus = run.profile, run.model, run.gpu, run.gpus
    from .workload.describe import describe, format_describe

    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise PolytraceError(f"-o {out}: exists and is not a folder")
    # the profile given or the default one, with its model and GPU count unless given (as impact)
    prof, model, gpus = default_workload(profile or None, model, gpus)
    steps_note = ""
    if steps is None:
        steps = list(DEFAULT_STEPS)
        steps_note = (f"{steps_text(steps)}: the report's default, so the plot shows how the step varies; "
                      f"`polytrace estimate` prices {steps_text(ESTIMATE_DEFAULT_STEPS)} unless told "
                      f"(`--steps {steps[0]}-{steps[-1]}` there gives these figures)")
    steps = list(steps)
    gpu = gpu or DEFAULT_GPU
    workload = describe(prof, steps=steps, seed=seed)

    from .stepmodel import report_section
    from .stepmodel.efficiency import PRIORS

    section = report_section(prof, model=model, gpu=gpu, gpus=gpus, steps=steps, seed=seed,
                             results_root=_results_root(), calibration=None if roofline else PRIORS)
    estimate = _render_estimate(section, model, gpu, gpus, explain=explain, steps_note=steps_note)
    text_parts = [format_describe(workload), "", estimate["text"]]
    data = {"workload": workload, "estimate": {k: section[k] for k in ("config", "summary", "rows", "source")},
            "steps": steps, "steps_note": steps_note or None}
    if not write:
        return {"text": "\n".join(text_parts), "path": None, "data": {**data, "report": None, "links": []}}
    created = first_missing(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolytraceError(f"-o {out}: cannot create folder: {exc.strerror or exc}") from None
    try:
        job = {"profile": prof, "model": model, "gpu": gpu, "gpus": gpus, "steps": steps, "seed": seed,
               "steps_note": steps_note}
        return _write_report(out, job, section, estimate["markdown"], data, text_parts)
    except BaseException:  # Ctrl-C or a failed write: a folder made here goes, else our temporary files
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        else:
            for tmp in out.glob("*.tmp.png"):
                tmp.unlink(missing_ok=True)
        raise


def _write_report(out: Path, job: dict, section: dict, estimate_md: str, data: dict, text_parts: list) -> dict:
    """report.md and its two plots into ``out``; the result of ``build_report``."""
    from tabulate import tabulate

    from .stepmodel import plot_stage_breakdown
    from .workload.describe import workload_table_rows

    prof, model, gpu, gpus, steps, seed = (job[k] for k in ("profile", "model", "gpu", "gpus", "steps", "seed"))
    steps_note, workload = job["steps_note"], data["workload"]
    report_path = out / "report.md"
    plot_path = out / "stage_breakdown.png"
    tmp_plot = plot_path.with_suffix(".tmp.png")
    plot_stage_breakdown(section["rows"], tmp_plot,
                         title=f"{prof.name} on {model}, {gpus} x {gpu}: estimated step time by stage, "
                         f"{steps_text(steps)}")
    os.replace(tmp_plot, plot_path)
    hist_path = out / "response_lengths.png"
    _plot_lengths(prof, steps, seed, hist_path)

    from .measure.results import report_links

    links = report_links(_results_root())
    md = [f"# polytrace report: {prof.name}", "",
          f"{prof.description}", "",
          f"Sampled from the `{prof.name}` profile at {steps_text(steps)}, seed {seed} "
          f"({prof.source}). Step times are **estimates** ({section['source']}), not measurements.", "",
          *([f"Steps: {steps_note}.", ""] if steps_note else []),
          "## Workload shape (mean over sampled steps)", "",
          tabulate(workload_table_rows(workload["summary"]), headers=["statistic", "value"], tablefmt="github"),
          "", f"![response lengths]({md_link(hist_path.name)})", "",
          "## Estimated RL step", "", estimate_md, "",
          f"![stage breakdown across steps]({md_link(plot_path.name)})", ""]
    md += _links_markdown(links, out)
    atomic_write_text(report_path, "\n".join(md))
    text_parts += ["", f"wrote {report_path} (with {plot_path.name}, {hist_path.name})"]
    return {"text": "\n".join(text_parts), "path": str(report_path),
            "data": {**data, "report": str(report_path), "links": [list(x) for x in links]}}


def _links_markdown(links: list, out: Path) -> list[str]:
    """The measured results (GPU timings: baselines, result files, tuned configs, their plots) and,
    under their own heading, the compile-only reports (compiled code, no timing)."""
    def item(title, path) -> str:
        rel = os.path.relpath(path, out.resolve()) if Path(path).is_absolute() else path
        return f"- [{title}]({md_link(rel)})"

    measured = [item(t, p) for t, p in links if not t.startswith("compile-only")]
    static = [item(t, p) for t, p in links if t.startswith("compile-only")]
    md = ["## Measured kernel results", ""]
    md += measured or ["No measured results under results/ yet (run scripts/device_check.sh on a GPU)."]
    if static:
        md += ["", "## Compiled-code reports (no timings)", "",
               "Each default kernel config compiled offline with the Triton named (registers, spills, "
               "occupancy, instructions per element); nothing was timed.", "", *static]
    return md + [""]


def _render_estimate(section: dict, model: str, gpu: str, gpus: int, explain: bool = False,
                     steps_note: str = "") -> dict:
    from tabulate import tabulate

    summary = section["summary"]
    steps = [r["step"] for r in section["rows"]]
    head = (f"estimated RL step: {section['profile']} on {model}, {gpus} x {gpu} "
            f"({section['source']}; mean over {steps_text(steps)})")
    stage_rows = [[stage, secs, share] for (stage, secs), share in
                  zip(summary["mean_stages_s"].items(), summary["stage_share"].values()) if secs > 0]
    stage_rows.append(["step", summary["mean_step_s"], 1.0])
    totals = [["tokens / s / GPU", f"{summary['tokens_per_s_per_gpu']:,.0f}"],
              ["GPU time in the rollout tail (under half the peak batch decoding)",
               f"{summary['rollout_tail_share']:.1%}"],
              ["GPU time idle: rollout engines waiting for the slowest engine",
               f"{summary['rollout_engine_wait_share']:.1%}"],
              ["GPU time idle: trainer ranks waiting for the slowest rank",
               f"{summary['trainer_rank_wait_share']:.1%}"]]
    mem = section.get("memory") or {}
    if mem:
        gpu_gb = mem["gpu_bytes"]
        totals += [["training peak memory per GPU", f"{mem['train_peak']:.1f} of {gpu_gb:.0f} GB"],
                   ["rollout peak memory per GPU", f"{mem['rollout_peak']:.1f} of {gpu_gb:.0f} GB"],
                   ["KV-cache capacity per engine", f"{mem['kv_capacity_tokens']:,.0f} tokens"]]
    warnings = [f"warning: {w}" for w in section.get("warnings", [])]
    kernels = _render_kernels(summary)
    from .stepmodel.estimate import TAIL_FIGURES_NOTE
    per_step = [[r["step"], r["step_s"], r["gen"], r["tokens_per_s_per_gpu"]] for r in section["rows"]]
    # warnings first: a configuration that cannot run is read before the numbers, not after them;
    # the note on the two tail figures is in report.md, and on screen with --explain
    text = "\n".join([
        *warnings, head, *([f"({steps_note})"] if steps_note else []), "",
        tabulate(stage_rows, headers=["stage", "seconds", "share"], floatfmt=(".0f", ".1f", ".1%")), "",
        tabulate(totals, headers=["where time goes", ""]), "",
        *([textwrap.fill(TAIL_FIGURES_NOTE, 100), ""] if explain else []),
        tabulate(per_step, headers=["step", "step s", "gen s", "tok/s/GPU"], floatfmt=(".0f", ".1f", ".1f", ".0f")),
        "", kernels["text"],
    ])
    markdown = "\n".join([
        f"{model} on {gpus} x {gpu}, mean over {steps_text(steps)}.", "",
        tabulate(stage_rows, headers=["stage", "seconds", "share"], floatfmt=(".0f", ".1f", ".1%"),
                 tablefmt="github"), "",
        tabulate(totals, headers=["where time goes", ""], tablefmt="github"), "", TAIL_FIGURES_NOTE,
        *(["", *[f"> **{w}**" for w in warnings]] if warnings else []),
        "", kernels["markdown"],
    ])
    return {"text": text, "markdown": markdown}


def _render_kernels(summary: dict) -> dict:
    """The kernel breakdown (seconds of each family per stage, share, measured or roofline) and
    the Amdahl table, as text and Markdown."""
    from .stepmodel.breakdown import amdahl_lines, grouped_source_lines, kernel_table, priors_constant_named

    summary = priors_constant_named(summary)
    factor = summary["amdahl"][0]["factor"] if summary.get("amdahl") else 2.0
    amdahl_head = (f"Amdahl: the step with one kernel family {factor:g}x faster "
                   f"(its share is the most any speedup of it can save)")
    text = "\n".join(["kernel families (seconds per stage, share of the step, where they come from):",
                      kernel_table(summary), "", *grouped_source_lines(summary), "", amdahl_head,
                      amdahl_lines(summary)])
    markdown = "\n".join(["### Kernel families", "",
                          "Seconds of each kernel family per stage (estimated), its share of the step, and "
                          "whether its timings were measured (result file and provider) or come from the "
                          "roofline at assumed efficiencies.", "",
                          kernel_table(summary, tablefmt="github"), "",
                          *[f"- {line}" for line in grouped_source_lines(summary)], "",
                          f"### {amdahl_head}", "", amdahl_lines(summary, tablefmt="github")])
    return {"text": text, "markdown": markdown}


def lengths_figure(profile, steps, seed):
    """Histogram of the sampled response lengths on a log axis that starts just below the shortest
    length (from 1 token, the short responses of a 32k-cap profile would sit in a corner), with a
    log count axis: the tail this project is about is a few responses per bin against thousands in
    the body, flat on a linear axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    lens = np.concatenate([profile.sample(step=s, seed=seed).response_lens for s in steps])
    cap = profile.config.max_response_len
    shortest, longest = (float(lens.min()), float(lens.max())) if lens.size else (1.0, 2.0)
    lo = max(1.0, shortest * 0.9)
    hi = max(longest, float(cap), lo * 1.5) * 1.1
    bins = np.unique(np.geomspace(lo, hi, 60).astype(int))
    ax.hist(lens, bins=bins, color="#4477aa")
    ax.set_xscale("log")
    ax.set_yscale("log")  # counts of 1 stay visible beside thousands
    ax.set_xlim(lo, hi)
    ax.set_xlabel("response length (tokens)")
    ax.set_ylabel("responses (log scale)")
    ax.axvline(cap, color="#cc3311", ls="--", lw=1, label="length cap")
    ax.set_title(f"{profile.name}: sampled response lengths, {steps_text(steps)}")
    ax.legend()
    fig.tight_layout()
    return fig


def _plot_lengths(profile, steps, seed, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = lengths_figure(profile, steps, seed)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
