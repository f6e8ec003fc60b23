"""The fixed set of prompt-chunk lengths a step may read (one place for all users).

A chunk's length is a tensor shape: every distinct length costs a compile (and, on a
GPU, a kernel specialisation). Planning only ever rounds DOWN to one of a few lengths,
powers of two from MIN_CHUNK up to the engine's prefill_chunk (which is always in the
set, power of two or not). A prompt's last chunk may be shorter (what is left of it);
padding it up to a length of this set is the runner's business (issue 10).
"""
from __future__ import annotations

MIN_CHUNK = 16      # the smallest chunk a step reads beside a decode


def chunk_lengths(max_chunk: int) -> tuple[int, ...]:
    """(16, 32, 64, ..., max_chunk), ascending; just (max_chunk,) when it is below 16."""
    if max_chunk <= MIN_CHUNK:
        return (max_chunk,)
    out, n = [], MIN_CHUNK
    while n < max_chunk:
        out.append(n)
        n *= 2
    return (*out, max_chunk)


def round_down(tokens: int, max_chunk: int) -> int:
    """The longest length of the set that is <= tokens; 0 when even the shortest is not."""
    fitting = [n for n in chunk_lengths(max_chunk) if n <= tokens]
    return fitting[-1] if fitting else 0
