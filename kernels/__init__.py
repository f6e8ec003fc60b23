"""Tandem's custom kernels: one module per operation, each with a plain-mx float32
reference (for tests and the self-test), CUDA and Metal sources, `applies` (the
shapes it handles) and `kernel` (the launch).

A loaded model holds a `KernelSet` (kernel_set.py), the one dispatch layer: per
call, kernel when the self-test passed it and the shapes fit, else the model's
own plain-mx path. `select_kernels()` makes one at load; its `status()` tells the
status panel what runs where.
"""
from kernels.backend import NAMES, absent_reason, gpu_backend
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.selftest import run_selftest, select_kernels

__all__ = ["NAMES", "KernelSet", "NO_KERNELS", "select_kernels", "run_selftest",
           "gpu_backend", "absent_reason"]
