"""The wiring tests' run: a model's logits through the plain path and through a kernel
set (usually one kernel's contract run by its reference), the same rows both times."""
import mlx.core as mx
import numpy as np

from kernels.kernel_set import NO_KERNELS, KernelSet


def plain_and_kernel_logits(model, kernels: KernelSet) -> tuple[list, list]:
    """(plain, kernel): float32 logits of a prefill of two rows (4 and 2 tokens) and
    three decode steps of both, once with NO_KERNELS and once with `kernels`."""
    from qwen_fixtures import Rows

    from engine.models.base import use_kernels
    runs = []
    for kernel_set in (NO_KERNELS, kernels):
        use_kernels(model, kernel_set)
        rows = Rows(model)
        for s in (0, 1):
            rows.start(s)
        out = [rows.forward({0: [5, 6, 7, 8], 1: [9, 10]})]
        for step in range(3):
            out.append(rows.forward({0: [11 + step], 1: [20 + step]}))
        runs.append([np.array(o.astype(mx.float32)) for o in out])
    return runs[0], runs[1]
