"""Session 20 diagnostic (H200): why does B=1 decode slow after a long prefill?

Sessions 16-19: in the A/B process, B=1 ran ~7 ms a step before any 2,048-token prefill
and 10-11 ms after (mlx-lm's B=1 in the same process slowed likewise, the GPU's watts
fell: the host's pace, not the GPU's work). A hypothesis: MLX's buffer cache, full of the
prefill's freed buffers, makes a decode step's allocations evict (cudaFree synchronizes
the device, so the pipelined step loses its overlap), or its lookups dearer. This script
holds only Tandem's model and times B=1 before and after prefills, then with the cache
emptied, then under a cache limit, printing MLX's active / cache memory at each point:

    PYTHONPATH=. python3 docs/bench/h200-session20-diag_cache.py
"""
import engine  # noqa: F401  (before mlx: the engine's library preload)
import statistics
import sys

import mlx.core as mx

from engine.bench.engine_start import open_engine
from engine.bench.runs import ours_decode, ours_prefill
from engine.bench.suite import _prompt
from engine.config import EngineConfig

MODEL = sys.argv[1] if len(sys.argv) > 1 else "synthetic:qwen3.5-35b-a3b"
LONG = int(sys.argv[2]) if len(sys.argv) > 2 else 16384   # a smaller one for a CPU smoke run
per_row = -(-(64 + 4 * 64 + 2 * 32 + 16) // 16)
cfg = EngineConfig(max_num_seqs=32, page_size=16, num_pages=32 * per_row + (max(LONG, 2048) + 600) // 16 + 64,
                   prefill_chunk=512, max_context=max(LONG, 2048) + 128)
eng = open_engine(MODEL, cfg)
V = eng.vocab_size
seed = iter(range(1000, 100000))


def mem(label: str) -> None:
    # Read between runs, the engine idle (its thread holds no work then).
    print(f"  [{label}] active {mx.get_active_memory() / 1e9:.2f} GB, cache "
          f"{mx.get_cache_memory() / 1e9:.2f} GB, peak {mx.get_peak_memory() / 1e9:.2f} GB",
          flush=True)


def b1(label: str, runs: int = 3) -> None:
    meds = []
    for _ in range(runs):
        med, extra = ours_decode(eng, [_prompt(32, V, next(seed))], 48)
        meds.append(med)
    print(f"{label}: B=1 medians {', '.join(f'{1000 * m:.2f}' for m in meds)} ms "
          f"(median {1000 * statistics.median(meds):.2f})", flush=True)
    mem(label)


def prefill(n: int) -> None:
    s, _ = ours_prefill(eng, _prompt(n, V, next(seed)))
    print(f"prefill {n}: {s:.3f} s", flush=True)
    mem(f"after prefill {n}")


b1("warm-up", 2)
b1("before any long prefill")
prefill(2048)
b1("after prefill 2048")
prefill(2048)
b1("after a second prefill 2048")
mx.clear_cache()
mem("cache cleared")
b1("after mx.clear_cache()")
prefill(LONG)
b1(f"after prefill {LONG}")
mx.clear_cache()
b1(f"after prefill {LONG} and mx.clear_cache()")
old = mx.set_cache_limit(2 * 1024 ** 3)
print(f"cache limit was {old / 1e9:.1f} GB, now 2.1 GB", flush=True)
prefill(2048)
b1("cache limit 2 GB, after prefill 2048")
prefill(LONG)
b1(f"cache limit 2 GB, after prefill {LONG}")
eng.close()
