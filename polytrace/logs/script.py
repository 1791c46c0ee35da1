"""Launch scripts as logs hold them: the shell text around a verl command, read without a shell.

Logs and the pages that publish them show the launch script in many shapes: a ``set -x`` trace
(``+ python3 -m verl.trainer.main_ppo ...``), a script pasted into a markdown fence or an rst
``code-block``, one override per line joined by ``\\`` continuations, values held in shell
variables (``MODEL_PATH=Qwen/Qwen2.5-7B-Instruct`` then ``actor_rollout_ref.model.path=$MODEL_PATH``,
``${GPUS:-8}``), ``#`` comments, ray-prefixed lines. This module turns such lines into logical
command lines with their variables expanded, the way bash would for the simple cases, and marks
what it cannot know (a variable never assigned, one set by ``$(...)``) instead of guessing.

Everything here is linear in the input: lines longer than ``MAX_COMMAND_CHARS`` are not commands
and are passed over (``shell_lines.py`` joins and splits the lines), and nested expansions stop at
``MAX_DEPTH`` levels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .shell_lines import LogicalLine, _matching_close, split_words

# ${A:-${B:-${C}}} nests rarely past 2; past 8 the text is not a script.
MAX_DEPTH = 8
# $((...)) arithmetic is evaluated only on short integer expressions.
MAX_ARITH_CHARS = 200

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_WORD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)(.*)$", re.S)
_DECLARE = ("export", "declare", "local", "readonly", "typeset")
_ARITH_OK = re.compile(r"^[\d\s+\-*/%()]+$")
_ASSIGN_START = re.compile(r"^(?:(?:export|declare|local|readonly|typeset)\s+(?:-\w+\s+)*)?[A-Za-z_]\w*\+?=")


NEVER_ASSIGNED = "is never assigned in the log"
BY_COMMAND = "is set by a command the log does not show"
SCRIPT_ARGUMENT = "is a script argument the log does not show"


@dataclass(frozen=True)
class Unresolved:
    """A value the log does not determine: ``text`` is it with what is known substituted and the
    unknown variables left as ``$NAME``; ``names`` lists those; ``reason`` says why."""

    text: str
    names: tuple[str, ...]
    reason: str = NEVER_ASSIGNED

    def __str__(self) -> str:
        return self.text

    def explain(self) -> str:
        names = ", ".join(f"${n}" for n in self.names) or self.text
        return f"{names} {self.reason}"


# --- expansion ---------------------------------------------------------------------------------


class Shell:
    """The variables a script assigned so far, and expansion against them."""

    def __init__(self):
        self.vars: dict[str, str | Unresolved] = {}

    def expand(self, text: str, depth: int = 0) -> str | Unresolved:
        """``text`` with ``$NAME``, ``${NAME}``, ``${NAME:-default}`` (and ``-``, ``:=``, ``=``,
        ``:+``, ``+``), ``$((arithmetic))`` substituted; an ``Unresolved`` when any part is
        unknown (its text keeps the known parts)."""
        if "$" not in text and "`" not in text:
            return text
        out: list[str] = []
        missing: list[str] = []
        reasons: list[str] = []

        def take(value: str | Unresolved) -> None:
            if isinstance(value, Unresolved):
                out.append(value.text)
                missing.extend(value.names)
                reasons.append(value.reason)
            else:
                out.append(value)

        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "`":
                end = text.find("`", i + 1)
                end = n if end < 0 else end + 1
                take(Unresolved(text[i:end], (text[i:end],), BY_COMMAND))
                i = end
                continue
            if c != "$" or i + 1 >= n:
                out.append(c)
                i += 1
                continue
            nxt = text[i + 1]
            if nxt == "(":
                end = _matching_close(text, i + 1)
                piece = text[i:end]
                value = self._arith(piece, depth) if piece.startswith("$((") else None
                take(Unresolved(piece, (piece,), BY_COMMAND) if value is None else value)
                i = end
                continue
            if nxt == "{":
                end = _matching_close(text, i + 1)
                take(self._braced(text[i + 2:end - 1], depth))
                i = end
                continue
            m = _NAME.match(text, i + 1)
            if m:
                take(self._lookup(m.group(0)))
                i = m.end()
                continue
            if nxt.isdigit() or nxt in "@*#?!$-":  # positional and special parameters
                take(Unresolved(text[i:i + 2], (text[i:i + 2],), SCRIPT_ARGUMENT))
                i += 2
                continue
            out.append(c)
            i += 1
        joined = "".join(out)
        if missing:
            names = tuple(dict.fromkeys(n.lstrip("$") for n in missing))
            return Unresolved(joined, names, reasons[0])
        return joined

    def _lookup(self, name: str) -> str | Unresolved:
        if name in self.vars:
            return self.vars[name]
        return Unresolved(f"${name}", (name,))

    def _braced(self, inner: str, depth: int) -> str | Unresolved:
        if depth >= MAX_DEPTH:
            return Unresolved("${" + inner + "}", (inner[:40],), "nests too deep to read")
        if inner.startswith("#"):  # ${#NAME}: a length
            value = self._lookup(inner[1:])
            return value if isinstance(value, Unresolved) else str(len(value))
        m = _NAME.match(inner)
        if not m:
            return Unresolved("${" + inner + "}", (inner[:40],), "is not a variable this reader follows")
        name, rest = m.group(0), inner[m.end():]
        if rest.startswith("[") and "]" in rest:  # ${ARR[@]}, ${ARR[0]}: the array's text
            rest = rest[rest.index("]") + 1:]
            value = self._lookup(name)
            if isinstance(value, str) and value.startswith("(") and value.endswith(")"):
                value = value[1:-1].strip()
            if not rest:
                return value
        else:
            value = self._lookup(name)
        if not rest:
            return value
        for op in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
            if rest.startswith(op):
                word = rest[len(op):]
                unset = isinstance(value, Unresolved) and value.reason == NEVER_ASSIGNED
                empty = unset or (op.startswith(":") and value == "")
                base = op.lstrip(":")
                if base in "-=":
                    if not empty:
                        return value
                    default = self.expand(word, depth + 1)
                    if base == "=" and not isinstance(default, Unresolved):
                        self.vars[name] = default
                    return default
                if base == "+":
                    return "" if empty else self.expand(word, depth + 1)
                return value  # ${NAME:?message}
        # ${NAME#prefix}, ${NAME%suffix}, ${NAME/a/b}, ${NAME:1:2}: not followed
        return Unresolved("${" + inner + "}", (name,), "is transformed in a way this reader does not follow")

    def _arith(self, piece: str, depth: int) -> str | None:
        """``$((expr))`` when ``expr`` is short integer arithmetic over known values."""
        if len(piece) > MAX_ARITH_CHARS or not piece.endswith("))"):
            return None
        body = piece[3:-2]
        body = re.sub(r"\$?\b([A-Za-z_][A-Za-z0-9_]*)\b", lambda m: "${" + m.group(1) + "}", body)
        value = self.expand(body, depth + 1)
        if isinstance(value, Unresolved) or not _ARITH_OK.match(value):
            return None
        return _eval_int(value)

    def assign(self, name: str, value: str | Unresolved, append: bool = False) -> None:
        if append and name in self.vars:
            old = self.vars[name]
            if isinstance(old, Unresolved) or isinstance(value, Unresolved):
                text = f"{old}{value}"
                names = tuple((old.names if isinstance(old, Unresolved) else ())
                              + (value.names if isinstance(value, Unresolved) else ()))
                value = Unresolved(text, names)
            else:
                value = old + value
        self.vars[name] = value

    def expand_word(self, word: list[tuple[str, str]], split: bool = True) -> list[str | Unresolved]:
        """One shell word -> the words it becomes (a bare expansion holding spaces splits, unless
        ``split`` is False: an assignment's value is expanded but never split, as bash does)."""
        pieces: list[str] = []
        missing: list[str] = []
        reason = ""
        split_points = False
        for seg, quoting in word:
            if quoting == "'":
                pieces.append(seg)
                continue
            value = self.expand(seg)
            if isinstance(value, Unresolved):
                missing.extend(value.names)
                reason = reason or value.reason
                value = value.text
            if quoting == "" and value != seg and any(ch in value for ch in " \t\n"):
                split_points = True
            pieces.append(value)
        text = "".join(pieces)
        if missing:  # an unknown value is kept as one word: how it would split is unknown too
            return [Unresolved(text, tuple(dict.fromkeys(missing)), reason)]
        return text.split() if split and split_points else [text]


def _eval_int(expr: str) -> str | None:
    import ast

    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv,
                                                                ast.Div, ast.Mod)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                if abs(a) > 2**62 or abs(b) > 2**62:
                    raise ValueError("too large")
                return a * b
            if b == 0:
                raise ValueError("division by zero")
            return a // b if isinstance(node.op, (ast.FloorDiv, ast.Div)) else a % b
        raise ValueError("not integer arithmetic")

    try:
        value = ev(tree)
    except (ValueError, RecursionError):
        return None
    return str(value) if abs(value) < 2**63 else None


# --- commands ----------------------------------------------------------------------------------


@dataclass
class Command:
    line: int
    words: list  # str | Unresolved, after expansion
    xtrace: bool = False


def run_script(logical: list[LogicalLine], wanted=None) -> tuple[list[Command], Shell]:
    """Walk the logical lines as a shell would for assignments: ``NAME=value`` (alone, after
    ``export``/``declare``/..., or as a command's environment prefix) is recorded; every other
    line becomes a ``Command`` of expanded words. ``set -x`` lines are taken as bash printed
    them (already expanded); their assignments are recorded too. ``wanted(text)`` picks the
    lines worth tokenising besides assignments (a log holds far more lines than its script)."""
    shell = Shell()
    commands: list[Command] = []
    for ll in logical:
        if "=" not in ll.text and "$" not in ll.text:
            continue  # neither an assignment nor an override: not worth tokenising
        if wanted is not None and not _ASSIGN_START.match(ll.text) and not wanted(ll.text):
            continue
        words = split_words(ll.text)
        if not words:
            continue
        first = "".join(seg for seg, _ in words[0])
        idx = 0
        if first in _DECLARE:
            idx = 1
            while idx < len(words) and "".join(s for s, _ in words[idx]).startswith("-"):
                idx += 1
        assigned_any = False
        while idx < len(words):
            w = words[idx]
            head = w[0][0] if w and w[0][1] == "" else ""
            m = _ASSIGN_WORD.match(head) if head else None
            if not m:
                break
            name, op, first_rest = m.group(1), m.group(2), m.group(3)
            rest_word = ([(first_rest, "")] if first_rest else []) + list(w[1:])
            if ll.xtrace:
                value: str | Unresolved = "".join(s for s, _ in rest_word)
            else:
                value = shell.expand_word(rest_word, split=False)[0]
                if isinstance(value, Unresolved) and value.reason == BY_COMMAND:
                    value = Unresolved(value.text, (name,), f"{BY_COMMAND} ({value.text[:80]})")
            shell.assign(name, value, append=op == "+=")
            assigned_any = True
            idx += 1
        if idx >= len(words):
            continue
        if first in _DECLARE and assigned_any:
            continue
        if ll.xtrace:
            out = ["".join(s for s, _ in w) for w in words[idx:]]
        else:
            out = []
            for w in words[idx:]:
                out.extend(shell.expand_word(w))
        commands.append(Command(ll.line, out, ll.xtrace))
    return commands, shell
