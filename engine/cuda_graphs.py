"""How much work MLX's CUDA backend puts in one CUDA graph, as a benchmark reports it.

MLX 0.32's CUDA backend records kernels into a CUDA graph and commits it (update, launch,
a completion handler) every MLX_MAX_OPS_PER_BUFFER kernels (100 on sm_90) or once the
graph's inputs pass MLX_MAX_MB_PER_BUFFER "MB" (1,000 on sm_90; counted in elements,
`array.data_size`, weights included: mlx/backend/cuda/device.cpp), and its eval waits
while 10 commits are in flight. One layer of Qwen3.5-35B-A3B's stacked experts is ~126M
elements, so a graph also closes every ~7 layers.

Sessions 18-19 lifted the byte limit on Linux (the kernel count alone bounding a graph)
and took it back: a one-process diagnostic ran B=1 steps in 4.9-6.7 ms against 7.7-8.8,
but the A/B bench (7.2 ms against 7.1 for B=1's first round) and kernel_time (7.60-7.95
against 7.35-8.45) saw no gain, and a 16,384-token prefill's peak rose 0.49 GB (a graph
holds its inputs until it completes; H200, docs/PERFORMANCE.md). So the engine runs at
MLX's defaults; a user (or a benchmark) may still set the variable, and the benches
print what their process runs under (a peer in the same process shares it).
Plain Python: no mlx here.
"""
from __future__ import annotations

import os

ENV_VAR = "MLX_MAX_MB_PER_BUFFER"


def graph_limit_setting() -> str:
    """The byte limit this process runs under, for a benchmark's header."""
    return f"{ENV_VAR} {os.environ.get(ENV_VAR, 'unset (MLX default)')}"
