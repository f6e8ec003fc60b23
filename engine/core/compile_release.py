"""What an engine thread compiled through mx.compile, dropped on that thread before it ends.

Why: MLX 0.32 keeps mx.compile's traces in a cache of the calling thread's (a C++
`thread_local`, mlx/compile.cpp), and a trace made from Python holds Python objects (its
output's tree structure: `AttachedData` in python/src/transforms.cpp). A compiled
function erases its traces when it is destroyed (`~PyCompiledFun`, GIL held), but only
from the cache of the thread that last called it, and only while that thread lives. Any
trace left when the engine thread ends is destroyed by the thread's own exit, after
Python has let go of it: Python objects released with no interpreter state, which
ml-explore/mlx#4347 and #4327 report as a segfault or abort at exit. Tandem's compiled
functions outlive the thread unless dropped: the sampler's in a module-level cache
(sampler._COMPILED), the forwards' in a reference cycle (CompiledForward's functions close
over it) that only a collection frees, on whatever thread runs it. So the engine thread,
on its way out, drops its sampler draws and collects its garbage itself, while the
compiled functions can still erase their traces. The likely cause of the exit segfault
after 6-minute CUDA soaks (docs/RELIABILITY.md; not yet run there since).
"""
from __future__ import annotations

import gc

from engine.core.sampler import release_compiled_draws


def release_thread_compiled(runner=None) -> None:
    """On the engine thread, as it ends: the runner's compiled forwards (if it has any)
    and this thread's compiled draws, then a collection for what a cycle still holds."""
    # compiled_chunks may be the decode's own CompiledForward: a set holds it once
    for compiled in {getattr(runner, "compiled", None),
                     getattr(runner, "compiled_chunks", None)} - {None}:
        compiled.release()
    release_compiled_draws()
    gc.collect()
