"""A scatter into a cache pool is queued only once no earlier GPU work still holds the pool.

MLX updates an array in place (`pool[rows] = new`) only when nothing else holds its
buffer; otherwise the scatter first copies the whole pool. On its GPU backends every
input of an evaluated op is held until the GPU has run it: CUDA keeps them as the
command encoder's temporaries until the graph completes (mlx/backend/cuda/eval.cpp,
`add_temporary`), Metal in the command buffer's completed handler
(mlx/backend/metal/eval.cpp). So a scatter queued while an earlier reader of the same
pool is still in flight copies the pool: the previous step's attention (steps are
pipelined), the decode rows queued just before a prompt chunk, the gather of a page
before its copy-on-write, the rows gathered for the disk cache. The CPU backend runs
ops as they are queued, so the CPU tests never saw it; the GPU suite did (session 47,
H100: tests/engine/test_mixed_step_memory.py, 67 MB added by a step on a 67 MB pool,
the whole pool once). That is issue 21's regression on a GPU: a copy a layer in
proportion to the pool, a step where a prompt is read beside streams or a turn ends.

Whoever builds such a scatter calls `note()`; the step's code calls `settle()` right
before it queues a graph (`queue`), and on a GPU, if a scatter was noted, settle waits
for the stream first (`mx.synchronize`: on CUDA it also waits for the completion
handlers that drop the held inputs). Work queued after the wait and before the scatter
must not read the pool: the callers settle immediately before queueing. A queue that
only reads (a gather for the disk cache, a draw) stays a plain `mx.async_eval`/`mx.eval`,
so the note is not spent before the graph that holds the scatter. Decode steps of
the real models write K/V and states in place by kernels (no scatter), so they never
wait and stay pipelined; a step that reads a prompt, copies pages, or loads a disk entry
waits once. The cost is the host time to queue that graph with the GPU idle. A turn's
state snapshot (Runner.copy_state_slots) does not note: the state pools are bounded by
the slots, not the context, and it lands in the first step after a prompt ends, whose
pipelining issue 23's slowest step needs; there MLX still copies the state pools.

Only the engine thread touches mx, and two engines run two threads: the note is per
thread.
"""
from __future__ import annotations

import threading

import mlx.core as mx

from kernels.backend import gpu_backend

_local = threading.local()
# Off: no wait, so a scatter behind a reader copies its pool as before (`bench
# --no-pool-waits`: the A/B of the wait's cost against the copy's).
WAITS = True


def note() -> None:
    """A scatter into a cache pool was built into the graph about to be queued."""
    _local.pending = True


def take() -> bool:
    """Whether a scatter was noted, clearing the note (a compiled forward's trace: its
    replays run no Python, so it notes again on every call whose trace noted)."""
    pending = getattr(_local, "pending", False)
    _local.pending = False
    return pending


def settle() -> bool:
    """Before queueing a graph: on a GPU, if a pool scatter was noted since the last
    settle, wait until no earlier work holds the pools. True if it waited."""
    if not take() or not WAITS or gpu_backend() is None:
        return False
    mx.synchronize()
    _local.waits = waits() + 1
    return True


def waits() -> int:
    """How many times this thread waited (tests: the deterministic signature)."""
    return getattr(_local, "waits", 0)


def queue(*arrays) -> None:
    """`mx.async_eval(*arrays)`, settled first."""
    settle()
    mx.async_eval(*arrays)


def run(*arrays) -> None:
    """`mx.eval(*arrays)`, settled first."""
    settle()
    mx.eval(*arrays)
