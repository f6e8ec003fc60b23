# Run on the H200 in session 7 as `python3 .device/r/diag_kern.py` from the repo root (main 56eff8d); output: h200-session7-2026-12-02.txt, "dkern".
# Session 7 GPU diagnostic 2: which in-place kernel makes a CUDA-graph engine run choose
# tokens the plain forward would not (the one-sequence compiled engine fails at (0, 1)).
import sys, numpy as np, mlx.core as mx
sys.path[:0] = ["tests/engine"]; sys.path.append("tests")
import test_compiled_decode as t
import engine.loading.model_bundle as mb
from kernels.kernel_set import KernelSet
from float32_tolerance import model_depth, tolerance
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.loading.model_bundle import InMemoryModel
from engine.sampling_params import SamplingParams
from qwen_fixtures import tiny_config

base = t._model("qwen3_5_moe")
ref = t._runner(base, compiled=False)
depth = model_depth(base, max(map(len, t.PROMPTS)) + 12)
full = mb.select_kernels(True)
print("kernels:", full.status(), flush=True)

def check(outs):
    bad = []
    for r, (p, out) in enumerate(zip(t.PROMPTS, outs)):
        lg = np.array(ref.full_logits(p + list(out)).astype(mx.float32))
        for j, tok in enumerate(out):
            row = lg[len(p) - 1 + j]
            if row[tok] < row.max() - 2 * tolerance(row, depth):
                bad.append((r, j, round(float(row.max() - row[tok]), 4))); break
    return bad

def run(name, off, compiled=True, seqs=1):
    ks = KernelSet(full.backend, full.off + tuple((n, "diag") for n in off))
    saved = mb.select_kernels
    mb.select_kernels = lambda use: ks
    try:
        config = EngineConfig(max_num_seqs=seqs, kv_budget_mb=8, prefill_chunk=16, fixed_shapes=True,
                              compile_decode=compiled, warm_up=compiled)
        m = InMemoryModel(base, t._IdTokenizer(), tiny_config(), "tiny")
        with Engine.from_model(m, config) as engine:
            outs = [o.token_ids for o in engine.generate(t.PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))]
    finally:
        mb.select_kernels = saved
    print(f"{name:34s} not-greedy (row, j, gap): {check(outs)}", flush=True)

INPLACE = ("attention_prep", "gdn_conv_step", "gated_delta_step", "gated_delta_chunk")
run("all kernels", ())
run("all kernels again", ())
for k in INPLACE:
    run(f"without {k}", (k,))
run("without the four in-place", INPLACE)
run("plain forward, 3 seqs, all kernels", (), compiled=False, seqs=4)
for k in INPLACE:
    run(f"plain forward, 3 seqs, without {k}", (k,), compiled=False, seqs=4)
