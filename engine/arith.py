"""Small integer helpers shared by the engine (pure Python)."""
from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """Smallest integer >= a / b, for positive b (pages for tokens, buckets for pages)."""
    return -(-a // b)
