# Run on the H200 in session 6 as `python3 .device/q/diag_compiled.py` from the repo root (output: h200-session6-2026-12-02.txt, "diag").
"""GPU diagnostic (session 6): where the compiled decode's cache differs from the plain one,
and which engine configuration decodes different tokens."""
import sys, numpy as np, mlx.core as mx
sys.path[:0] = ["tests", "tests/engine"]
import test_compiled_decode as t
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.loading.model_bundle import InMemoryModel
from engine.sampling_params import SamplingParams
from qwen_fixtures import tiny_config

model = t._model("qwen3_5_moe")
next_ids = [[20 + s, 30 + s, 40 + s] for s in range(t.STEPS)]
runs, logits = {}, {}
for compiled in (False, True):
    r = t._runner(model, compiled)
    logits[compiled] = t._decode_steps(r, next_ids)
    runs[compiled] = [np.array(a.astype(mx.float32)) for a in r.cache_arrays()]
    print("compiled" if compiled else "plain", "num cache arrays", len(runs[compiled]),
          "scratch slot", r.scratch_slot, "page", r.page_size)
for s in range(t.STEPS):
    print(f"step {s}: logits max |compiled - plain| = {np.abs(logits[True][s] - logits[False][s]).max():.3g}")
ref = t._runner(model, compiled=False)
for row, prompt in enumerate(t.PROMPTS):
    ids = prompt + [next_ids[s][row] for s in range(t.STEPS)]
    alone = np.array(ref.full_logits(ids).astype(mx.float32))
    for c in (False, True):
        d = max(np.abs(logits[c][s][row] - alone[len(prompt) + s]).max() for s in range(t.STEPS))
        print(f"row {row} {'compiled' if c else 'plain'} vs alone: max {d:.3g}")
for i, (p, c) in enumerate(zip(runs[False], runs[True])):
    d = np.abs(p - c)
    if d.max() == 0:
        print(f"array {i} {p.shape}: equal"); continue
    idx = np.argwhere(d > 1e-3 * max(1.0, np.abs(p).max()))
    lead = sorted(set(int(x) for x in idx[:, 0]))
    print(f"array {i} {p.shape}: max {d.max():.3g}; rows with diffs (axis 0): {lead[:40]}"
          f"{' ...' if len(lead) > 40 else ''}; plain there zero: {bool((p[lead] == 0).all()) if lead else None};"
          f" compiled there zero: {bool((c[lead] == 0).all()) if lead else None}")

class Tok(t._IdTokenizer):
    pass
for use_kernels in (False, True):
    for compiled in (False, True):
        config = EngineConfig(max_num_seqs=4, kv_budget_mb=8, prefill_chunk=16, fixed_shapes=True,
                              compile_decode=compiled, warm_up=compiled, use_kernels=use_kernels)
        m = InMemoryModel(t._model("qwen3_5_moe"), t._IdTokenizer(), tiny_config(), "tiny")
        with Engine.from_model(m, config) as engine:
            outs = [o.token_ids for o in engine.generate(t.PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))]
        print(f"engine kernels={use_kernels} compiled={compiled}: {outs}", flush=True)
for warm in (False, True):
    config = EngineConfig(max_num_seqs=4, kv_budget_mb=8, prefill_chunk=16, fixed_shapes=True,
                          compile_decode=True, warm_up=warm, use_kernels=True)
    m = InMemoryModel(t._model("qwen3_5_moe"), t._IdTokenizer(), tiny_config(), "tiny")
    with Engine.from_model(m, config) as engine:
        outs = [o.token_ids for o in engine.generate(t.PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))]
    print(f"engine kernels=True compiled=True warm_up={warm}: {outs}", flush=True)
