"""Session 19 diagnostic (H200): the experts kernels with each nibble read as a float
through its bits (`NIBBLE` below: no int-to-float conversion) against the conversion
kernels/moe_experts_src.py makes, in one process, alternating; then rows per warp.
Measured (docs/bench/h200-session19b-2026-12-04.txt): no gain from the bits (2-4 %
slower, the same output bit for bit), so the sources keep the conversion; 8 gate/up rows
a warp and 4 down rows (RPW1, RPW2) were 14-18 % faster from 4 tokens up.

    PYTHONPATH=. python3 docs/bench/h200-session19-diag_moe.py

Real shapes (E=256, k=8, D=2048, I=512, 4-bit group 64, bf16, the shared expert),
random routing as kernels/bench/moe_experts.py. A script, not a test.
"""
import mlx.core as mx
import numpy as np

import kernels.moe_experts as me
import kernels.moe_experts_src as mes
from kernels.bench.common import compare
from kernels.bench.moe_experts import D, E, _block

OLD_DOT = "acc += float((w[i] >> (4 * t)) & 0xFu) * x[8 * i + t];"
NEW_DOT = "acc += nibble(w[i], t) * x[8 * i + t];"
# 0x4B000000 | q is the float 2^23 + q exactly; subtracting 2^23 leaves q.
NIBBLE = """
__device__ __forceinline__ float nibble(unsigned w, int t) {
  return __int_as_float(0x4B000000u | ((w >> (4 * t)) & 0xFu)) - 8388608.f;
}
"""


def built(header, gate_up, down, tag):
    make = mx.fast.cuda_kernel
    return (make(name=f"tandem_moe_gate_up{tag}",
                 input_names=["x", "idx", "w", "scales", "biases", "sw", "ss", "sb"],
                 output_names=["h"], source=gate_up, header=header),
            make(name=f"tandem_moe_down{tag}",
                 input_names=["h", "idx", "scores", "w", "scales", "biases", "sw", "ss", "sb",
                              "gate", "residual"],
                 output_names=["y"], source=down, header=header, ensure_row_contiguous=False))


def main():
    header, gate_up, down = mes._SOURCES["cuda"]
    assert OLD_DOT in header
    old = me._get("cuda")
    new = built(NIBBLE + header.replace(OLD_DOT, NEW_DOT), gate_up, down, "_bits")
    block = _block()
    experts = block._block_experts()
    rng = np.random.default_rng(0)

    def run(kset, x, idx, scores, gate, res, rpw1=4, rpw2=2):
        """Session 19's first run had RPW1=4, RPW2=2 as the module's constants."""
        saved = me.RPW1, me.RPW2
        me._built["cuda"] = kset
        me.RPW1, me.RPW2 = rpw1, rpw2
        try:
            return me.kernel(x, idx, scores, experts, gate, res, backend="cuda")
        finally:
            me.RPW1, me.RPW2 = saved
    me.MAX_PAIRS = 10 ** 6
    for N in (1, 4, 8, 16, 32):
        x = mx.random.normal((N, D), key=mx.random.key(N)).astype(mx.bfloat16)
        idx = mx.array(np.stack([rng.choice(E, 8, replace=False) for _ in range(N)]), mx.int32)
        scores = mx.softmax(mx.random.normal((N, 8)), axis=-1)
        res = mx.random.normal((N, D)).astype(mx.bfloat16)
        gate = mx.random.normal((N, 1)).astype(mx.bfloat16)
        mx.eval(x, idx, scores, res, gate)
        a, b = run(old, x, idx, scores, gate, res), run(new, x, idx, scores, gate, res)
        diff = mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()
        fns = {"i2f": lambda: run(old, x, idx, scores, gate, res),
               "bits": lambda: run(new, x, idx, scores, gate, res)}
        for r1, r2 in ((8, 2), (16, 2), (4, 4), (8, 4)):       # the sources' conversion
            fns[f"rpw{r1}/{r2}"] = (lambda r1=r1, r2=r2:
                                    run(old, x, idx, scores, gate, res, r1, r2))
        t = compare(fns, calls=40, rounds=7)
        print(f"N={N:3d} max|i2f - bits| {diff:.3g}  " + "  ".join(
            f"{k} {1e6 * v:7.1f}us" for k, v in t.items()), flush=True)


if __name__ == "__main__":
    main()
