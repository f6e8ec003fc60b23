# Run on the H200 in session 7 as `python3 .device/r/diag_race.py` (and with MLX_USE_CUDA_GRAPHS=0) from the repo root; output: h200-session7-2026-12-02.txt.
# Session 7 GPU diagnostic: which engine setting makes the compiled kernel decode choose
# tokens the plain forward would not (tests/engine/test_compiled_decode.py's engine test).
import sys, os, numpy as np, mlx.core as mx
sys.path[:0] = ["tests/engine"]; sys.path.append("tests")
import test_compiled_decode as t
from float32_tolerance import model_depth, tolerance
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.core.step_loop import StepLoop
from engine.loading.model_bundle import InMemoryModel
from engine.sampling_params import SamplingParams
from qwen_fixtures import tiny_config

print("MLX_USE_CUDA_GRAPHS", os.environ.get("MLX_USE_CUDA_GRAPHS"), flush=True)
base = t._model("qwen3_5_moe")
ref = t._runner(base, compiled=False)
depth = model_depth(base, max(map(len, t.PROMPTS)) + 12)
alone = {}

def check(outs):
    bad = []
    for r, (p, out) in enumerate(zip(t.PROMPTS, outs)):
        key = tuple(p + list(out))
        if key not in alone:
            alone[key] = np.array(ref.full_logits(list(key)).astype(mx.float32))
        lg = alone[key]
        for j, tok in enumerate(out):
            row = lg[len(p) - 1 + j]
            if row[tok] < row.max() - 2 * tolerance(row, depth):
                bad.append((r, j, round(float(row.max() - row[tok]), 4)))
                break
    return bad

def run(name, compiled=True, chunk=16, pipeline=True, fixed=True, seqs=4):
    saved = StepLoop._can_pipeline
    if not pipeline:
        StepLoop._can_pipeline = lambda self: False
    try:
        config = EngineConfig(max_num_seqs=seqs, kv_budget_mb=8, prefill_chunk=chunk, fixed_shapes=fixed,
                              compile_decode=compiled, warm_up=compiled)
        m = InMemoryModel(base, t._IdTokenizer(), tiny_config(), "tiny")
        with Engine.from_model(m, config) as engine:
            outs = [o.token_ids for o in engine.generate(t.PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))]
    finally:
        StepLoop._can_pipeline = saved
    print(f"{name:28s} not-greedy (row, j, gap): {check(outs)}  {outs}", flush=True)

for i in range(2):
    run(f"plain #{i}", compiled=False)
for i in range(3):
    run(f"compiled #{i}")
run("compiled no-pipeline #0", pipeline=False)
run("compiled no-pipeline #1", pipeline=False)
run("compiled chunk64 #0", chunk=64)
run("compiled chunk64 #1", chunk=64)
run("compiled no-fixed-shapes", fixed=False)
run("compiled one-seq", seqs=1)
