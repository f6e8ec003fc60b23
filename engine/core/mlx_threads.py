"""MLX 0.32 needs every thread that used it to clear its streams before the thread
(or the process) ends, or the process aborts at exit with "terminate called without
an active exception" (ml-explore/mlx#3395)."""
from __future__ import annotations

import mlx.core as mx


def clear_thread_streams() -> None:
    try:
        mx.synchronize()
    except RuntimeError:        # this thread never made a stream of the default device
        pass
    mx.clear_streams()
