"""Session 18 diagnostic (H200): is B=1's slow round (101 tok/s against ~160, sessions 16
and 17) the prompt's prefix-cache hit, or what ran before (a 2,048-token prefill)?

The bench decodes B=1 from the same 32-token prompt every round (seed 0, which the B=16
and B=32 runs also read), so from the second round on it can come from the prefix cache.
Here: B=1 from a fresh prompt and from a repeated one, before and after a 2,048 prefill,
with the same engine configuration as `python3 -m engine bench --batch 1,16,32`.
Run: PYTHONPATH=. python3 docs/bench/h200-session18-diag_b1.py
"""
import engine  # noqa: F401  (before mlx: the engine's library preload)
import statistics
import sys

from engine.bench.engine_start import open_engine
from engine.bench.runs import Steps, ours_decode, ours_prefill, steady_decode
from engine.bench.suite import _prompt
from engine.config import EngineConfig
from engine.sampling_params import SamplingParams

model = sys.argv[1] if len(sys.argv) > 1 else "synthetic:qwen3.5-35b-a3b"
per_row = -(-(64 + 4 * 16 + 2 * 32 + 16) // 16)
cfg = EngineConfig(max_num_seqs=32, page_size=16, num_pages=32 * per_row + 2200 // 16 + 64,
                   prefill_chunk=512, max_context=2048 + 16 + 16 + 16)
eng = open_engine(model, cfg)
vocab = 248320 if "35b" in model else 1000
P0 = _prompt(32, vocab, 0)


def b1(label, prompt):
    with Steps(eng) as rec:
        eng.generate([prompt], SamplingParams(max_tokens=16 + 6))
    kinds = [(e.kind, e.batch_size) for e in rec.events][:3]
    d = [e.duration for e in steady_decode(rec.events, 1)]
    print(f"{label:28s} median {1000 * statistics.median(d):6.2f} ms  max "
          f"{1000 * max(d):6.2f}  n {len(d)}  first {kinds}", flush=True)


for seed in (900, 901):
    b1("warm fresh", _prompt(32, vocab, seed))
for trial in range(3):
    b1(f"t{trial} P0 (repeat)", P0)
    b1(f"t{trial} fresh", _prompt(32, vocab, 1000 + trial))
    print("prefill 2048", ours_prefill(eng, _prompt(2048, vocab, 5000 + trial))[0], flush=True)
    b1(f"t{trial} after prefill: P0", P0)
    b1(f"t{trial} after prefill: fresh", _prompt(32, vocab, 2000 + trial))
    b1(f"t{trial} again P0", P0)
    print("decode B=16", ours_decode(eng, [_prompt(32, vocab, s) for s in range(16)], 16), flush=True)
    b1(f"t{trial} after B=16: P0", P0)
eng.close()
