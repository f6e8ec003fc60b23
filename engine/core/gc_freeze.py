"""Python's cyclic garbage collector, kept out of the steps.

CPython starts a collection by itself whenever enough container objects have been made,
and a full one walks every tracked object: ~44,000 once MLX, the tokenizer stack and a
40-layer model are loaded, 8-14 ms on a 2-core CI machine (`gc.collect(2)` after an
engine opens on the 40-layer toy of Qwen3.5). Whichever thread starts it holds the GIL
until it ends, so the engine thread's next step waits; at B=16 on the H100 (an 8.5 ms
step) one such step would be ~2x the median, the limit issue 23 sets for the slowest. What is alive once the engine is Ready (the imports, the
model, the compiled forwards) lives as long as the engine, so it is frozen there
(`gc.freeze`: a permanent generation no collection walks); later collections walk only
what was made since. Closing an engine unfreezes everything, so a closed model's
reference cycles can be collected again; a process with another engine still open then
walks its objects again until that one closes too (the app holds one engine at a time).
"""
from __future__ import annotations

import gc


def engine_ready() -> None:
    """An engine is loaded and warmed: freeze what is alive now."""
    gc.freeze()


def engine_closed() -> None:
    """An engine that was ready has stopped: let its objects be collected again."""
    gc.unfreeze()
