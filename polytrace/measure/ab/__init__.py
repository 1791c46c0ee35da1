"""``polytrace ab``: two git revisions' kernels timed side by side in one process.

Drift between sessions on a shared GPU is 5-20%; two result files from two sessions cannot tell
it from a regression. ``ab`` checks BASE (and CAND, unless it is the working tree) out into
temporary worktrees (``revisions``), imports both revisions' ``kernels/`` and ``suites/`` under
distinct module names (``loader``), and times every selected case of our providers with BASE and
CAND rounds interleaved in pairs on the same inputs (``measure``), so drift hits both alike. Per
case a paired test (Wilcoxon signed-rank on the per-pair log ratios, ``paired``) AND the threshold
decide; per (family, kernel, mode, provider) a weighted geometric mean with a bootstrap interval,
as the gate; both outputs are checked against BASE's fp64 reference (``report``). The verdict
carries the step-time line of ``polytrace.stepmodel.impact``. Exit 0 pass, 1 regression or changed
outputs, 2 refused or could not compare.
"""

from __future__ import annotations

from .render import format_markdown, format_text
from .report import AbReport, CaseResult
from .runner import run_ab, stderr_progress

__all__ = ["AbReport", "CaseResult", "format_markdown", "format_text", "run_ab", "stderr_progress"]
