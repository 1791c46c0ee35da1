"""``-k EXPR`` over benchmark ids, as pytest reads it: words matched as case-insensitive substrings,
combined with ``and``, ``or``, ``not`` and parentheses (``-k "logprob and not torch"``)."""

from __future__ import annotations

import re
from collections.abc import Callable

from ...errors import PolytraceError

MAX_EXPR_CHARS = 1000
MAX_NESTING = 32  # parentheses and "not"s in a row: enough for any real filter, bounded recursion
_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def keyword_matcher(expr: str | None, what: str = "-k") -> Callable[[str], bool]:
    """A predicate over ids; ``None`` or an empty expression matches everything."""
    if expr is None or not expr.strip():
        return lambda _id: True
    if len(expr) > MAX_EXPR_CHARS:
        raise PolytraceError(f"{what}: expression of {len(expr)} characters is too long (at most {MAX_EXPR_CHARS})")
    tokens = [m.group(1) for m in _TOKEN.finditer(expr)]
    parser = _Parser(tokens, expr, what)
    tree = parser.parse_or(0)
    if parser.pos != len(tokens):
        raise parser.error(f"unexpected {tokens[parser.pos]!r}")
    return lambda ident: _evaluate(tree, ident.lower())


class _Parser:
    def __init__(self, tokens: list[str], expr: str, what: str):
        self.tokens, self.pos, self.expr, self.what = tokens, 0, expr, what

    def error(self, message: str) -> PolytraceError:
        return PolytraceError(f"{self.what} {self.expr!r}: {message}")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def parse_or(self, depth: int):
        terms = [self.parse_and(depth)]
        while self.peek() == "or":
            self.pos += 1
            terms.append(self.parse_and(depth))
        return terms[0] if len(terms) == 1 else ("or", terms)

    def parse_and(self, depth: int):
        terms = [self.parse_not(depth)]
        while self.peek() == "and":
            self.pos += 1
            terms.append(self.parse_not(depth))
        return terms[0] if len(terms) == 1 else ("and", terms)

    def parse_not(self, depth: int):
        if depth > MAX_NESTING:
            raise self.error(f"nested more than {MAX_NESTING} deep")
        tok = self.peek()
        if tok is None:
            raise self.error("expected a word after the last operator" if self.tokens else "empty expression")
        self.pos += 1
        if tok == "not":
            return ("not", self.parse_not(depth + 1))
        if tok == "(":
            inner = self.parse_or(depth + 1)
            if self.peek() != ")":
                raise self.error("missing ')'")
            self.pos += 1
            return inner
        if tok in (")", "and", "or"):
            raise self.error(f"unexpected {tok!r}")
        return ("word", tok.lower())


def _evaluate(node, ident: str) -> bool:
    kind, arg = node
    if kind == "word":
        return arg in ident
    if kind == "not":
        return not _evaluate(arg, ident)
    if kind == "and":
        return all(_evaluate(n, ident) for n in arg)
    return any(_evaluate(n, ident) for n in arg)
