"""Every relative link in the project's Markdown (README.md, docs/, the folders' README files)
leads somewhere: the file exists, and a ``#fragment`` names a heading of the target as GitHub
anchors it (lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeats).

A link is resolved from the folder of the file that holds it, as GitHub renders it: a link
written in docs/ to ``results/README.md`` points at docs/results/README.md, which does not exist
(two such links had rotted after the layout moved). Links inside fenced code and absolute URLs
are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _documents() -> list[Path]:
    found = {ROOT / "README.md", *(ROOT / "docs").glob("*.md")}
    for pattern in ("*/README.md", "*/*/README.md"):
        # not a hidden folder's (.pytest_cache holds a README.md, .venv a package's)
        found.update(p for p in ROOT.glob(pattern)
                     if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))
    return sorted(found)


def _outside_fences(text: str):
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def github_anchors(text: str) -> set[str]:
    """The fragment GitHub gives each heading of a Markdown text."""
    out, seen = set(), {}
    for _, line in _outside_fences(text):
        m = HEADING.match(line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2)).strip().lower()
        anchor = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        n = seen.get(anchor, 0)
        seen[anchor] = n + 1
        out.add(anchor if n == 0 else f"{anchor}-{n}")
    return out


def test_github_anchors_follow_githubs_rules():
    text = "# Getting the data\n## `polytrace/run/` (one config)\n```\n# not a heading\n```\n## Getting the data\n"
    assert github_anchors(text) == {"getting-the-data", "polytracerun-one-config", "getting-the-data-1"}


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    broken = []
    for number, line in _outside_fences(doc.read_text(encoding="utf-8")):
        for _, target in LINK.findall(line):
            if re.match(r"^[a-zA-Z][a-zA-Z+.-]*:", target):  # http:, https:, mailto: ...
                continue
            path, _, fragment = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}:{number}: {target}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in github_anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{doc.relative_to(ROOT)}:{number}: {target}: no such heading in {dest.name}")
    assert not broken, "\n".join(broken)
