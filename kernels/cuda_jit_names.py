"""How MLX 0.32's CUDA backend wraps a custom kernel's body and names its compiled module.

Plain Python, no mlx: kernels/bench/nvcc_check.py compiles the wrapped sources here, and
kernels/kernel_seeding.py writes compiled modules where MLX looks for them. Read in MLX's
source (unchanged from v0.32.1 through the 0.32.4 wheel's branch):
- mlx/backend/cuda/custom_kernel.cpp `build_kernel`: the default header, the kernel's
  own header, the signature (inputs as `const T*`, with `Shape`/`Strides`/`ndim` for the
  names the body uses, of inputs that have a shape; outputs as `T*`), the template
  constants, the body; `template_arguments_hash` and the kernel's name
  `custom_kernel_<name><template hash>`; the module's name `<kernel>_<std::hash of the
  source, hex>`.
- mlx/backend/common/compiled.cpp `get_type_string` (the template hash's dtype names) and
  mlx/backend/cuda/utils.cpp `dtype_to_cuda_type` (the source's).
- mlx/backend/cuda/jit_module.cpp `get_ptx_path`: `<cache>/<module>.ptx`, names longer
  than 245 characters split into folders.
A template value is a bool, an int or a dtype's name ("bfloat16"); MLX checks bool
before int, as here.
"""
from __future__ import annotations

from pathlib import Path

CUDA_TYPES = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
              "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t",
              "uint32": "uint32_t", "uint64": "uint64_t", "float16": "__half",
              "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
              "complex64": "mlx::core::cu::complex64_t"}
HASH_TYPES = {"float32": "float", "float16": "float16_t", "bfloat16": "bfloat16_t",
              "float64": "double", "complex64": "complex64_t", "bool": "bool",
              "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
              "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
              "uint64": "uint64_t"}
DEFAULT_HEADER = ('\n#include "mlx/backend/cuda/device/utils.cuh"\n\n'
                  '#include <cooperative_groups.h>\n\n')
_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907


# The arguments MLX adds for an input with a shape whose `<name>_<suffix>` the body holds.
SHAPE_ARGS = (("shape", "Shape"), ("strides", "Strides"), ("ndim", "int"))


def shape_names(body: str, input_names: list[str]) -> list[str]:
    """The `<input>_<suffix>` texts MLX finds in the body (a substring test, as MLX's)."""
    return [f"{n}_{s}" for n in input_names for s, _ in SHAPE_ARGS if f"{n}_{s}" in body]


def kernel_name(name: str, template) -> str:
    """`custom_kernel_<name>` and the template hash (ints `_5`, bools `_t`/`_f`, dtypes
    `_bfloat16_t`)."""
    h = ""
    for _, v in template:
        if isinstance(v, bool):
            h += "_t" if v else "_f"
        elif isinstance(v, int):
            h += f"_{v}"
        else:
            h += "_" + HASH_TYPES[v]
    return "custom_kernel_" + name + h


def wrap_source(func_name: str, header: str, body: str, inputs, outputs, template) -> str:
    """The source MLX compiles. inputs: (name, dtype, ndim); outputs: (name, dtype)."""
    s = DEFAULT_HEADER + header
    s += "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
    s += f"__global__ void {func_name}(\n"
    for name, dtype, ndim in inputs:
        s += f"    const {CUDA_TYPES[dtype]}* {name},\n"
        if ndim > 0:     # MLX looks for the names in the body only, not the header
            for suffix, kind in SHAPE_ARGS:
                if f"{name}_{suffix}" in body:
                    s += f"    const __grid_constant__ {kind} {name}_{suffix},\n"
    s += ",\n".join(f"    {CUDA_TYPES[dtype]}* {name}" for name, dtype in outputs) + ") {\n"
    for k, v in template:
        if isinstance(v, bool):
            s += f"  constexpr bool {k} = {'true' if v else 'false'};\n"
        elif isinstance(v, int):
            s += f"  constexpr int {k} = {v};\n"
        else:
            s += f"  using {k} = {CUDA_TYPES[v]};\n"
    if template:
        s += "\n"
    return s + body + "\n}\n\n} // namespace mlx::core::cu\n"


def std_hash(data: bytes) -> int:
    """libstdc++'s `std::hash<std::string>` on 64-bit Linux: `_Hash_bytes(p, n, 0xc70f6907)`
    (MurmurHash64A with its tail read little-endian; libstdc++-v3/libsupc++/hash_bytes.cc)."""
    def shift_mix(v: int) -> int:
        return v ^ (v >> 47)
    n = len(data)
    h = (_SEED ^ (n * _MUL)) & _MASK
    aligned = n & ~7
    for i in range(0, aligned, 8):
        word = int.from_bytes(data[i:i + 8], "little")
        h = ((h ^ ((shift_mix((word * _MUL) & _MASK) * _MUL) & _MASK)) * _MUL) & _MASK
    if n & 7:
        h = ((h ^ int.from_bytes(data[aligned:], "little")) * _MUL) & _MASK
    h = (shift_mix(h) * _MUL) & _MASK
    return shift_mix(h)


def module_name(kernel: str, source: str) -> str:
    return f"{kernel}_{std_hash(source.encode()):x}"


def module_path(cache_dir: Path, module: str) -> Path:
    """Where MLX reads the module's compiled code (`.ptx`, even for a cubin); its
    `.txt` (name, tab, mangled name) sits beside it."""
    limit = 245
    if len(module) <= limit:
        return Path(cache_dir) / (module + ".ptx")
    path, offset = Path(cache_dir), 0
    while len(module) - offset > limit:
        path /= module[offset:offset + limit]
        offset += limit
    return path / (module[offset:] + ".ptx")
