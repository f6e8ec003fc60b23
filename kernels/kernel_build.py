"""A custom kernel built once per backend (CUDA or Metal source; the counting stand-in),
and the one-element constants kernels take as inputs. Every kernel module builds its
kernel through this, so how MLX is asked for a kernel is written once."""
from __future__ import annotations

from functools import cache

import mlx.core as mx

from kernels.cuda_source_files import included
from kernels.kernel_seeding import SEEDER, dtype_name, mlx_cache_dir
from kernels.stand_in import COUNT, StandInKernel


def cuda_kernel(*, name: str, input_names: list[str], output_names: list[str], source: str,
                header: str = "", ensure_row_contiguous: bool = True, shared_memory: int = 0):
    """`mx.fast.cuda_kernel`, whose every new instance is also compiled into MLX's disk
    cache by kernels/kernel_seeding.py (MLX keeps none of a custom kernel's), with its
    header and body as `#include` lines (kernels/cuda_source_files.py: MLX hashes the
    whole source at every launch). shared_memory: the dynamic shared memory of every
    launch, in bytes (MLX raises the kernel's limit past 48 KB)."""
    files = included(name, header, source, input_names, mlx_cache_dir())
    if files is not None:
        header, source = files.header, files.body
    return _SeededCudaKernel(name, input_names, output_names, source, header,
                             ensure_row_contiguous, shared_memory, files)


class _SeededCudaKernel:
    _files = None       # the included files (cuda_source_files), written again before a new instance

    def __init__(self, name, input_names, output_names, source, header, row_contiguous,
                 shared_memory=0, files=None):
        self._files = files
        self._kernel = mx.fast.cuda_kernel(
            name=name, input_names=input_names, output_names=output_names, source=source,
            header=header, ensure_row_contiguous=row_contiguous, shared_memory=shared_memory)
        self._spec = (name, header, source, input_names, output_names)
        self._seen: set = set()

    def __call__(self, *, inputs, output_dtypes, template=(), **launch):
        template = list(template or ())
        key = (tuple((a.dtype, a.ndim) if isinstance(a, mx.array) else None for a in inputs),
               tuple(output_dtypes), tuple(template))
        if key not in self._seen:
            self._seen.add(key)
            if self._files is not None:
                self._files.ensure()       # MLX compiles a new instance from them
            self._note(key)
        if SEEDER.dry:
            return [mx.zeros(shape, dtype)
                    for shape, dtype in zip(launch["output_shapes"], output_dtypes)]
        return self._kernel(inputs=inputs, output_dtypes=output_dtypes,
                            template=template or None, **launch)

    def _note(self, key) -> None:
        """What MLX builds this instance's source from (kernels/cuda_jit_names.py)."""
        name, header, source, input_names, output_names = self._spec
        if None in key[0]:      # a Python scalar input: MLX picks its dtype; not seeded
            return
        inputs = [(n, dtype_name(d), nd) for n, (d, nd) in zip(input_names, key[0])]
        outputs = [(n, dtype_name(d)) for n, d in zip(output_names, key[1])]
        template = tuple((k, dtype_name(v) if isinstance(v, mx.Dtype) else v)
                         for k, v in key[2])
        ingredients = (name, header, source, inputs, outputs, template)
        SEEDER.note(repr((name, hash(header), hash(source)) + ingredients[3:]), ingredients)


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
            make = cuda_kernel if backend == "cuda" else mx.fast.metal_kernel
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
