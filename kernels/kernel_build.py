"""A custom kernel built once per backend (CUDA or Metal source; the counting stand-in),
and the one-element constants kernels take as inputs. Every kernel module builds its
kernel through this, so how MLX is asked for a kernel is written once."""
from __future__ import annotations

from functools import cache

import mlx.core as mx

from kernels.stand_in import COUNT, StandInKernel


class KernelBuild:
    def __init__(self, name: str, kernel_name: str, inputs: list[str], outputs: list[str],
                 cuda_source: str, metal_source: str, cuda_header: str = "",
                 row_contiguous: bool = True, metal_header: str = ""):
        """name: the kernel's NAME (the stand-in's); kernel_name: MLX's. row_contiguous:
        MLX copies inputs to row-contiguous first (False: the kernel reads strides)."""
        self.name, self.kernel_name = name, kernel_name
        self.inputs, self.outputs = inputs, outputs
        self.sources = {"cuda": cuda_source, "metal": metal_source}
        self.headers = {"cuda": cuda_header, "metal": metal_header}
        self.row_contiguous = row_contiguous
        self._built: dict[str, object] = {}

    def get(self, backend: str):
        """The kernel for 'cuda' | 'metal' (built on first use), or a stand-in for COUNT."""
        if backend == COUNT:
            return StandInKernel(self.name)
        if backend not in self._built:
            make = mx.fast.cuda_kernel if backend == "cuda" else mx.fast.metal_kernel
            extra = {"header": self.headers[backend]} if self.headers[backend] else {}
            self._built[backend] = make(
                name=self.kernel_name, input_names=self.inputs, output_names=self.outputs,
                source=self.sources[backend], ensure_row_contiguous=self.row_contiguous,
                **extra)
        return self._built[backend]


@cache
def scalar(value: float, dtype=mx.float32) -> mx.array:
    """A one-element input (eps, a log base), evaluated once and shared."""
    a = mx.array([value], dtype=dtype)
    mx.eval(a)
    return a
