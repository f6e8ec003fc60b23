"""How much work MLX's CUDA backend puts in one CUDA graph: a whole decode step's worth.

MLX 0.32's CUDA backend records kernels into a CUDA graph and commits it (update, launch,
a completion handler) every MLX_MAX_OPS_PER_BUFFER kernels (100 on sm_90) or once the
graph's inputs pass MLX_MAX_MB_PER_BUFFER "MB" (1,000 on sm_90; counted in elements,
`array.data_size`, weights included: mlx/backend/cuda/device.cpp), and its eval waits
while 10 commits are in flight. One layer of Qwen3.5-35B-A3B's stacked experts is ~126M
elements, with a layer's recurrent state pool ~150M: a graph closed every ~7 layers
besides every 100 kernels, and a B=1 decode step (378 kernels, 4.2 ms of GPU work) took
7.7-8.8 ms. With the kernel count alone bounding a graph it took 4.9-6.7 ms (H200,
session 18, one process per setting, docs/PERFORMANCE.md; B=16 and a 2,048-token
prefill unchanged). Another MLX project measured the same on this model family on a
GB10 (+22 % single-stream decode with both limits raised; dense models lost up to 9 %
there, from larger graphs: here the kernel count's 100 stays). A graph holds its inputs
until it completes, so the limit also bounds memory held by intermediates: a prompt
chunk's forward (512 tokens by default) keeps at most its 100 kernels' intermediates.

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


def graph_limit_setting() -> str:
    """The byte limit this process runs under, for a benchmark's header (a peer in the
    same process shares it)."""
    return f"{ENV_VAR} {os.environ.get(ENV_VAR, 'unset')}"
