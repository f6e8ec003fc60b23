"""The fixed shapes forwards run at, so the set of shapes MLX compiles kernels for is finite.

MLX compiles kernels (NVRTC on CUDA) the first time it meets a shape; a new decode
batch size stalled its first steps up to 1.6 s and a first 512-token prefill took
15.7 s against 0.39 s warm (issue 10). So decode batches are padded up to a size in
`decode_sizes`, a compiled decode's block tables up to a width in `table_widths` (each
width is an mx.compile trace of its own), and prompt chunks up to a length in
`chunk_lengths`, and the warm-up at load (engine/core/warm_up.py) runs each once. This is the one module that says which
shapes exist: the runner pads to them, the warm-up compiles them, and the scheduler's
prefill policy picks its chunk lengths from the same set.

Plain Python (no mlx): the scheduler imports it.
"""
from __future__ import annotations

from engine.arith import ceil_div

# Powers of two: a padded decode batch is at most twice the real one, and a decode
# step is bound by launches and weight reads, not by its rows.
DECODE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# Prompt chunk lengths (tokens per row of a prefill forward).
CHUNK_LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# A compiled decode's block tables are this many pages wide, or a power of two above:
# a context crossing a width is a new shape, so a conversation meets few of them.
MIN_TABLE_WIDTH = 8


def _sizes(table: tuple[int, ...], limit: int) -> tuple[int, ...]:
    """The table's entries below limit, then limit itself: every size up to limit is
    padded to one of these, and none is padded past the limit."""
    if limit < 1:
        raise ValueError(f"a shape limit must be >= 1, not {limit}")
    return tuple(s for s in table if s < limit) + (limit,)


def decode_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """Batch sizes a decode forward runs at, for an engine of max_num_seqs rows."""
    return _sizes(DECODE_SIZES, max_num_seqs)


def chunk_lengths(max_chunk: int) -> tuple[int, ...]:
    """Token lengths a prefill forward runs at, for chunks of at most max_chunk."""
    return _sizes(CHUNK_LENGTHS, max_chunk)


def _pad(n: int, sizes: tuple[int, ...]) -> int:
    if n < 1:
        raise ValueError(f"cannot pad {n} rows or tokens: need at least 1")
    # Past the largest size (a caller beyond its limit): run as is.
    return next((s for s in sizes if s >= n), n)


def padded_batch(n: int, max_num_seqs: int) -> int:
    """The decode batch size n rows run at."""
    return _pad(n, decode_sizes(max_num_seqs))


def padded_chunk(n: int, max_chunk: int) -> int:
    """The prefill length a forward of n tokens per row (at most) runs at."""
    return _pad(n, chunk_lengths(max_chunk))


def table_width(num_pages: int) -> int:
    """The block-table width (pages) a compiled decode reads num_pages pages at."""
    return max(MIN_TABLE_WIDTH, 1 << (num_pages - 1).bit_length())


def table_widths(max_pages: int) -> tuple[int, ...]:
    """Every width a sequence of at most max_pages pages can take, smallest first."""
    widths = [MIN_TABLE_WIDTH]
    while widths[-1] < table_width(max_pages):
        widths.append(2 * widths[-1])
    return tuple(widths)


def chunk_layouts(max_chunk: int, page_size: int, max_pages: int) -> list[tuple]:
    """(length, width, fresh, ragged) of every compiled prompt chunk a prompt of at most
    max_pages pages can run (EngineConfig.compile_chunks; engine/core/compiled_forward.py
    traces each apart): a first chunk (fresh) at the width its tokens need; a later one at
    every width from the first past its own tokens to the widest; each with all its tokens
    and one short of them (a prompt's padded rest)."""
    out = []
    for n in chunk_lengths(max_chunk):
        variants = (False, True) if n > 1 else (False,)
        out += [(n, table_width(ceil_div(n, page_size)), True, r) for r in variants]
        out += [(n, w, False, r) for w in table_widths(max_pages) if w * page_size > n
                for r in variants]
    return out


MIN_CHUNK = CHUNK_LENGTHS[0]    # the smallest chunk a step reads beside a decode


def round_down(tokens: int, max_chunk: int) -> int:
    """The prefill policy's chunk: the longest length of the set that is <= tokens;
    0 when even the shortest is not."""
    fitting = [n for n in chunk_lengths(max_chunk) if n <= tokens]
    return fitting[-1] if fitting else 0
