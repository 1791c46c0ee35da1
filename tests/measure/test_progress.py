"""One progress policy for long work (``polytrace.measure.progress``): a plain line every few seconds and
one at the end when stderr is not a terminal (a log), never carriage-return redraws; nothing for a
short run; a live bar only on a terminal. The length plot of ``report`` counts on a log axis."""

from __future__ import annotations

import io

from polytrace.measure.progress import Progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_in_a_log_a_line_every_few_seconds_and_one_at_the_end():
    out, clock = io.StringIO(), Clock()
    bar = Progress(10, "tune pack", unit="cfg", stream=out, every_s=5.0, clock=clock)
    for _ in range(10):
        clock.t += 2.0  # 2 s per config: a line at 6 s (first past 5 s), 12 s and 18 s, then the end
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines == ["tune pack: 3/10 cfgs (30%), 6 s", "tune pack: 6/10 cfgs (60%), 12 s",
                     "tune pack: 9/10 cfgs (90%), 18 s", "tune pack: 10/10 cfgs (100%), 20 s"]


def test_a_short_run_prints_nothing_and_disabled_prints_nothing():
    out, clock = io.StringIO(), Clock()
    bar = Progress(3, "x", stream=out, clock=clock)
    bar.update(3)
    bar.close()
    assert out.getvalue() == ""
    quiet = Progress(3, "x", stream=out, clock=clock, enabled=False)
    clock.t = 100.0
    quiet.update(3)
    quiet.close()
    assert out.getvalue() == ""


def test_on_a_terminal_a_live_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    bar = Progress(4, "ab", stream=out)
    bar.update(4)
    bar.close()
    assert bar.bar is not None and "\r" in out.getvalue()


def test_report_length_plot_has_a_log_count_axis():
    import matplotlib.pyplot as plt

    from polytrace.report import lengths_figure
    from polytrace.workload.profiles import get_profile

    fig = lengths_figure(get_profile("deepcoder-14b"), [0], 0)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    plt.close(fig)
