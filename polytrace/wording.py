"""Small wording helpers shared by every printed line (no imports of ours: any floor may use them)."""

from __future__ import annotations


def counted(n: int | float, noun: str, plural: str | None = None) -> str:
    """``counted(1, "GPU")`` -> "1 GPU", ``counted(8, "GPU")`` -> "8 GPUs" (thousands separated)."""
    value = int(n) if float(n).is_integer() else n
    word = noun if value == 1 else (plural or noun + "s")
    return f"{value:,} {word}"
