"""Logical command lines and their words, from the physical lines of a log (``script.py`` expands
them): ``set -x`` traces, markdown and rst fences, ray prefixes and ``#`` comments taken off,
``\\`` continuations joined, and a line split into shell words with their quoting kept.

Everything here is linear in the input: lines longer than ``MAX_COMMAND_CHARS`` are not commands
and are passed over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A real launch command with every override on one line is 2-20 kB; a joined one above this is
# not a command (a base64 dump, a tensor printed whole) and is not tokenised.
MAX_COMMAND_CHARS = 200_000

_RAY_PREFIX = re.compile(r"^\((?:[\w:.\-]+ )*pid=\d+(?:, ip=[\d.]+)?\)\s?")
_XTRACE = re.compile(r"^\++ ")


@dataclass
class LogicalLine:
    line: int  # 1-based line number in the log where the command starts
    text: str  # the command text, continuations joined, comments cut
    xtrace: bool = False  # echoed by ``set -x``: bash already expanded it


def _strip_decorations(text: str) -> tuple[str, bool, bool]:
    """(text, is_xtrace, is_fence_or_directive) for one physical line."""
    s = _RAY_PREFIX.sub("", text.lstrip(), count=1) if text.lstrip().startswith("(") else text.lstrip()
    if s.startswith("> "):  # a quoted block in a markdown page
        s = s[2:].lstrip()
    if s.startswith(("```", "~~~")) or s.startswith(".. code-block") or s.startswith(".. code::"):
        return "", False, True
    if s.startswith("$ "):  # a shell prompt in a pasted session
        s = s[2:]
    m = _XTRACE.match(s)
    if m:
        return s[m.end():], True, False
    return s, False, False


def cut_comment(text: str) -> str:
    """``text`` without a trailing ``# comment`` (a ``#`` that starts a word, outside quotes)."""
    if "#" not in text:
        return text
    quote = ""
    prev = " "
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c == "#" and prev in " \t;(":
            return text[:i].rstrip()
        prev = c
        i += 1
    return text


def logical_lines(lines) -> list[LogicalLine]:
    """Commands of the script text in ``lines`` (1-based ``(number, text)`` pairs or plain
    strings): markdown fences, rst directives and ``#`` comment lines dropped, ``set -x``
    markers, ray prefixes and shell prompts stripped, ``\\`` continuations joined (a comment line
    inside a continuation is skipped, as people comment out one override of a long command)."""
    out: list[LogicalLine] = []
    buf: list[str] = []
    size = 0
    start = 0
    xtrace_start = False
    for item in lines:
        number, raw = item if isinstance(item, tuple) else (0, item)
        if len(raw) > MAX_COMMAND_CHARS:
            buf, size = [], 0
            continue
        text, xtrace, fence = _strip_decorations(raw)
        if fence:
            if buf:
                out.append(LogicalLine(start, " ".join(buf), xtrace_start))
                buf, size = [], 0
            continue
        stripped = text.strip()
        if stripped.startswith("#"):
            continue  # a comment line (inside a continuation too)
        body = cut_comment(text).rstrip()
        cont = body.endswith("\\") and not body.endswith("\\\\")
        if cont:
            body = body[:-1]
        if not buf:
            start, xtrace_start = number, xtrace
        if size + len(body) > MAX_COMMAND_CHARS:
            buf, size = [], 0
            continue
        buf.append(body.strip())
        size += len(body) + 1
        if not cont:
            joined = " ".join(p for p in buf if p)
            if joined:
                out.append(LogicalLine(start, joined, xtrace_start))
            buf, size = [], 0
    if buf:
        joined = " ".join(p for p in buf if p)
        if joined:
            out.append(LogicalLine(start, joined, xtrace_start))
    return out


# --- words -------------------------------------------------------------------------------------


def split_words(text: str) -> list[list[tuple[str, str]]]:
    """Shell words of ``text``, each a list of ``(segment, quoting)`` pieces where quoting is
    ``"'"`` (single-quoted: literal), ``'"'`` (double-quoted: expanded, not split) or ``""``
    (bare: expanded and split on whitespace). Unbalanced quotes close at the end of the text,
    as a truncated log line would need."""
    words: list[list[tuple[str, str]]] = []
    cur: list[tuple[str, str]] = []
    seg: list[str] = []
    mode = ""  # current quoting of seg
    in_word = False
    i, n = 0, len(text)

    def flush_seg():
        nonlocal seg
        if seg:
            cur.append(("".join(seg), mode))
            seg = []

    while i < n:
        c = text[i]
        if mode == "'":
            if c == "'":
                flush_seg()
                mode = ""
            else:
                seg.append(c)
            i += 1
            continue
        if mode == '"':
            if c == '"':
                flush_seg()
                mode = ""
            elif c == "\\" and i + 1 < n and text[i + 1] in '"\\$`':
                seg.append(text[i + 1])
                i += 1
            else:
                seg.append(c)
            i += 1
            continue
        if c in " \t\n":
            if in_word:
                flush_seg()
                words.append(cur)
                cur = []
                in_word = False
            i += 1
            continue
        in_word = True
        if c in "'\"":
            flush_seg()
            mode = c
        elif c == "\\" and i + 1 < n:
            flush_seg()
            cur.append((text[i + 1], "'"))  # an escaped character is literal
            i += 1
        elif c == "$" and i + 1 < n and text[i + 1] in "({":
            # keep $(...) / ${...} / $((...)) whole so the spaces inside do not split the word
            end = _matching_close(text, i + 1)
            seg.append(text[i:end])
            i = end
            continue
        else:
            seg.append(c)
        i += 1
    flush_seg()
    if in_word or cur:
        words.append(cur)
    return words


def _matching_close(text: str, open_at: int) -> int:
    """Index just past the bracket closing the one at ``open_at`` (or the end of the text)."""
    opener = text[open_at]
    closer = ")" if opener == "(" else "}"
    depth = 0
    i, n = open_at, len(text)
    while i < n:
        c = text[i]
        if c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == "\\":
            i += 1
        i += 1
    return n
