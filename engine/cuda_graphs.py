"""How much work MLX's CUDA backend puts in one CUDA graph: a whole decode step's worth.

MLX 0.32's CUDA backend records kernels into a CUDA graph and commits it (update, launch,
a completion handler) every MLX_MAX_OPS_PER_BUFFER kernels (100 on sm_90) or once the
graph's input bytes pass MLX_MAX_MB_PER_BUFFER (1,000 MB on sm_90;
mlx/backend/cuda/device.cpp). Those bytes count every input, weights included: one
layer of Qwen3.5-35B-A3B's experts is ~450 MB, so a B=1 decode step (378 kernels)
committed a graph every ~2 layers, ~20 a step, and the step was the host's: 4.2 ms of
GPU work in 7.7-8.8 ms. Without the byte limit (the kernel count still bounds a graph)
the same step took 4.9-6.7 ms (H200, session 18, docs/PERFORMANCE.md; B=16 and a
2,048-token prefill unchanged). A graph holds its inputs until it completes, so the
limit also bounds memory held by intermediates: a prompt chunk's forward (512 tokens by
default) keeps at most its 100 kernels' intermediates, tens of MB a layer.

Only where MLX has a CUDA backend (Linux); Metal's command buffers read the same
variable with their own defaults (40-50 MB), which this leaves alone: unmeasured there.
A value the user (or a benchmark) already set is kept. Before mlx reads it: called
from ``engine/__init__.py``. Plain Python: no mlx here.
"""
from __future__ import annotations

import os
import sys

ENV_VAR = "MLX_MAX_MB_PER_BUFFER"
NO_BYTE_LIMIT_MB = "1000000"     # a graph of 100 kernels never reaches it


def lift_cuda_graph_byte_limit() -> None:
    """Let the kernel count alone bound a CUDA graph (Linux, where unset)."""
    if sys.platform.startswith("linux"):
        os.environ.setdefault(ENV_VAR, NO_BYTE_LIMIT_MB)
