"""Session 18 diagnostic (H200): does MLX's CUDA graph size limit cost B=1 its host time?

MLX 0.32's CUDA backend commits a CUDA graph every MLX_MAX_OPS_PER_BUFFER kernels (100 on
sm_90) or once the graph's inputs pass MLX_MAX_MB_PER_BUFFER (1,000 on sm_90,
mlx/backend/cuda/device.cpp; counted in elements, weights included: ~126M for one layer's
stacked experts, so a graph closes every ~7 layers as well), and its eval waits while 10
commits are in flight. (Written first as "bytes, ~20 graphs a step": MLX's data_size is
in elements.) Run once per setting, each in its own
process (MLX reads them once):

    PYTHONPATH=. python3 docs/bench/h200-session18-diag_graphs.py
    MLX_MAX_MB_PER_BUFFER=1000000 PYTHONPATH=. python3 docs/bench/h200-session18-diag_graphs.py
"""
import engine  # noqa: F401  (before mlx: the engine's library preload)
import os
import statistics

from engine.bench.engine_start import open_engine
from engine.bench.runs import ours_decode, ours_prefill
from engine.bench.suite import _prompt
from engine.config import EngineConfig

per_row = -(-(64 + 4 * 64 + 2 * 32 + 16) // 16)
cfg = EngineConfig(max_num_seqs=32, page_size=16, num_pages=32 * per_row + 2200 // 16 + 64,
                   prefill_chunk=512, max_context=2048 + 64 + 64)
eng = open_engine("synthetic:qwen3.5-35b-a3b", cfg)
V = 248320
print("env:", {k: os.environ.get(k) for k in ("MLX_MAX_MB_PER_BUFFER", "MLX_MAX_OPS_PER_BUFFER")},
      flush=True)
ours_decode(eng, [_prompt(32, V, 1)], 16)                    # warm
ours_decode(eng, [_prompt(32, V, s) for s in range(16)], 16)
for label, B in (("B=1", 1), ("B=16", 16), ("B=1", 1), ("B=16", 16), ("B=1", 1)):
    runs = [ours_decode(eng, [_prompt(32, V, 100 * r + s) for s in range(B)], 48)
            for r in range(2)]
    med = statistics.median(r[0] for r in runs)
    print(f"{label}: median step {1000 * med:.2f} ms ({B / med:.1f} tok/s), slowest "
          f"{1000 * max(r[1]['slowest_s'] for r in runs):.2f} ms", flush=True)
print(f"prefill 2048: {ours_prefill(eng, _prompt(2048, V, 7))[0]:.3f} s", flush=True)
eng.close()
