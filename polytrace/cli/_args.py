"""argparse value types shared by the subcommands: a bad value is a one-line usage error."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return v


def step_list(text: str) -> list[int]:
    """``0-7``, ``0,50,100`` or ``0-200:20`` (every 20th)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                span, _, stride = part.partition(":")
                lo, hi = (int(x) for x in span.split("-"))
                out.extend(range(lo, hi + 1, int(stride) if stride else 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"steps must look like 0-7, 0,50,100 or 0-200:20; got {text!r}") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"steps must be non-negative and non-empty; got {text!r}")
    return out
