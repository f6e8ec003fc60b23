"""MLX's CUDA gather_qmm reading past K, shown (a GPU queue job).

Session 50's whole GPU suite: one pytest worker's CUDA context died ("an illegal memory
access was encountered") at the load of test_bench_peer_only's second engine; every later
test in that worker failed on it (79 of the run's 80 failures). That load's first GPU work
was the MoE tune's plain path (engine/loading/grouped_tune.py): gather_qmm over the toy
model's bf16 experts, whose down projection has K = 64 = the group size.

The reading (MLX 0.32.1 to main, mlx/backend/cuda/device/qmm_sm80.cuh): qmm_sm80, which
gather_qmm takes for bf16/f16 inputs with N % 128 == 0 and 8+ rows, fills its 3-stage
pipeline with 2 K tiles of max(64, group) before its loop, whatever K is. With K in one
tile the second load reads a tile past the end of x and of the last expert's weights:
never used (the results are right), but an illegal access where the memory after the
array is not mapped. engine/models/moe.gathered_qmm now routes such products around it.

This runs gather_qmm (MLX's) and gathered_qmm (ours) on such shapes and controls, and
prints each one's largest |GPU - CPU| over the CPU's largest |value|, or what it raised.
Under compute-sanitizer's memcheck the out-of-bounds reads are named as they happen
(MLX's rows only, if the route works); with CUDA_LAUNCH_BLOCKING=1 a read that faults
raises at its op. Run:
  compute-sanitizer --tool memcheck python3 docs/bench/gather_qmm_one_group_check.py
  CUDA_LAUNCH_BLOCKING=1 PYTHONPATH=. python3 docs/bench/gather_qmm_one_group_check.py
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

EXPERTS, N = 16, 128
# (pairs, K, group, sorted): the toy's down projection (K = 64 = group) sorted and not,
# then controls with two groups along K; the last is the real model's down shape.
SHAPES = [(16, 64, 64, False), (64, 64, 64, True), (256, 64, 64, True),
          (2048, 64, 64, True), (256, 64, 32, True), (256, 128, 64, True),
          (2048, 128, 64, True), (256, 512, 64, True)]


def run(device, pairs: int, k: int, gs: int, sort: bool, dtype, ours=False) -> np.ndarray:
    kx, kw, ki = mx.random.split(mx.random.key(pairs * 7 + k), 3)
    x = mx.random.normal((pairs, 1, k), key=kx).astype(dtype)
    w = (mx.random.normal((EXPERTS, N, k), key=kw) / k ** 0.5).astype(dtype)
    idx = mx.random.randint(0, EXPERTS, (pairs,), key=ki).astype(mx.uint32)
    if sort:
        idx = mx.sort(idx)
    with mx.stream(device):
        wq, s, b = mx.quantize(w, group_size=gs, bits=4)
        if ours:
            from engine.models.moe import gathered_qmm
            y = gathered_qmm(x, wq, s, b, None, idx, gs, 4, "affine", sort)
        else:
            y = mx.gather_qmm(x, wq, s, b, rhs_indices=idx, transpose=True,
                              group_size=gs, bits=4, sorted_indices=sort)
        mx.eval(y)
    return np.array(y.astype(mx.float32))


def main() -> None:
    print(f"mlx {mx.__version__}")
    if not mx.is_available(mx.gpu):
        print("no GPU here: nothing to compare")
        return
    for ours in (False, True):
        for dtype in (mx.bfloat16, mx.float32):
            for pairs, k, gs, sort in SHAPES:
                label = (f"{'gathered_qmm' if ours else 'gather_qmm  '} {str(dtype):14s} "
                         f"pairs={pairs:<5} K={k:<4} group={gs} "
                         f"{'sorted' if sort else 'unsorted'}")
                print(f"{label}: ...", flush=True)     # before the op: memcheck's lines
                want = run(mx.cpu, pairs, k, gs, sort, dtype)
                try:
                    got = run(mx.gpu, pairs, k, gs, sort, dtype, ours)
                except Exception as e:      # the answer this script exists for
                    print(f"{label}: raised {type(e).__name__}: {str(e)[:200]}",
                          flush=True)
                    continue
                d = float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-30)
                print(f"{label}: max |d| / max |cpu| = {d:.2e}", flush=True)


if __name__ == "__main__":
    main()
