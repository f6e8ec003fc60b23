"""Does MLX's CUDA gather_qmm read out of bounds with one group along K? (a GPU queue job)

Session 50's whole GPU suite: one pytest worker's CUDA context died ("an illegal memory
access was encountered") at the load of test_bench_peer_only's second engine, after its
first test (our engine, then mlx-lm on the same toy weights) had passed; every later test
in that worker failed on it (79 of the run's 80 failures). The failing load's first GPU
work was the MoE tune's plain path (engine/loading/grouped_tune.py): gather_qmm over 128
to 2,048 sorted (token, expert) pairs of the toy model's experts, whose down projection
has K = 64 = the group size. MLX's CUDA quantized_matmul is known wrong at one group along
K (engine/loading/cuda_qmm_guard.py: garbage ~3e38, which reads like memory it should not
read); gather_qmm at that K with sorted pairs was never checked there.

This prints, GPU against CPU, each shape's largest |difference| over the CPU's largest
|value|, or the error the GPU raised. Run it with CUDA_LAUNCH_BLOCKING=1 so an illegal
access raises at the op that made it (then the process's context is gone: the shapes
after it all raise; the first one named is the answer).
Run: CUDA_LAUNCH_BLOCKING=1 PYTHONPATH=. python3 docs/bench/gather_qmm_one_group_check.py
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


def run(device, pairs: int, k: int, gs: int, sort: bool, dtype) -> np.ndarray:
    kx, kw, ki = mx.random.split(mx.random.key(pairs * 7 + k), 3)
    x = mx.random.normal((pairs, 1, k), key=kx).astype(dtype)
    w = (mx.random.normal((EXPERTS, N, k), key=kw) / k ** 0.5).astype(dtype)
    idx = mx.random.randint(0, EXPERTS, (pairs,), key=ki).astype(mx.uint32)
    if sort:
        idx = mx.sort(idx)
    with mx.stream(device):
        wq, s, b = mx.quantize(w, group_size=gs, bits=4)
        y = mx.gather_qmm(x, wq, s, b, rhs_indices=idx, transpose=True, group_size=gs,
                          bits=4, sorted_indices=sort)
        mx.eval(y)
    return np.array(y.astype(mx.float32))


def main() -> None:
    print(f"mlx {mx.__version__}")
    if not mx.is_available(mx.gpu):
        print("no GPU here: nothing to compare")
        return
    for dtype in (mx.bfloat16, mx.float32):
        for pairs, k, gs, sort in SHAPES:
            label = (f"{str(dtype):14s} pairs={pairs:<5} K={k:<4} group={gs} "
                     f"{'sorted' if sort else 'unsorted'}")
            want = run(mx.cpu, pairs, k, gs, sort, dtype)
            try:
                got = run(mx.gpu, pairs, k, gs, sort, dtype)
            except Exception as e:      # the answer this script exists for
                print(f"{label}: raised {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            d = float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-30)
            print(f"{label}: max |d| / max |cpu| = {d:.2e}", flush=True)


if __name__ == "__main__":
    main()
