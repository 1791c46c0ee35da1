"""Small wording helpers shared by every printed line (no imports of ours: any floor may use them)."""

from __future__ import annotations


def counted(n: int | float, noun: str, plural: str | None = None) -> str:
    """``counted(1, "GPU")`` -> "1 GPU", ``counted(8, "GPU")`` -> "8 GPUs" (thousands separated)."""
    value = int(n) if float(n).is_integer() else n
    word = noun if value == 1 else (plural or noun + "s")
    return f"{value:,} {word}"


def first_few(parts: list[str], n: int = 3) -> str:
    """The first ``n`` of ``parts`` joined by "; ", then "; and K more" for the rest."""
    return "; ".join(parts[:n]) + (f"; and {len(parts) - n} more" if len(parts) > n else "")
