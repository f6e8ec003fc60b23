"""The device headers MLX's CUDA backend compiles custom kernels with, read from its library.

MLX embeds `mlx/backend/cuda/device/*.cuh` in libmlx.so (bin2h: each file's text, NUL
terminated) and hands them to NVRTC by name (jit_module.cpp `g_headers`); only config.h
is installed as a file. Compiling a kernel as MLX does (kernels/kernel_seeding.py) needs
the same text, so it is taken from the very library this process loaded: each header
known here by lines only it has, the one text of the library that has them all (its
copies identical). A header not found, or found twice with different texts, is left out:
kernels that include it are then compiled by MLX itself, as before. Plain Python, no mlx.
"""
from __future__ import annotations

import re
from pathlib import Path

PREFIX = "mlx/backend/cuda/device/"
# Lines of each header no other one has (MLX 0.32: utils.cuh includes complex.cuh and
# config.h, which is also installed beside the library).
MARKERS = {
    "utils.cuh": (b"using Shape = cuda::std::array<int32_t, MAX_NDIM>;",
                  b"using Strides = cuda::std::array<int64_t, MAX_NDIM>;"),
    "complex.cuh": (b"using complex_t = cuda::std::complex<T>;",
                    b"using complex64_t = complex_t<float>;"),
    "config.h": (b"#define MAX_NDIM",),
}
_TEXT = re.compile(rb"// Copyright[^\x00]{64,}?\x00")
_INCLUDE = re.compile(r'#include\s+"(mlx/backend/cuda/device/[^"]+)"')


def embedded_headers(library: bytes, installed: Path | None = None) -> dict[str, bytes]:
    """{include name: text} of the headers in MARKERS that are found exactly once (an
    installed config.h is read from `installed`, the library's include folder)."""
    texts = [m.group()[:-1] for m in _TEXT.finditer(library)]
    found: dict[str, bytes] = {}
    for name, marks in MARKERS.items():
        hits = {t for t in texts if all(m in t for m in marks)}
        if len(hits) == 1:
            found[PREFIX + name] = hits.pop()
    if installed is not None:
        on_disk = installed / (PREFIX + "config.h")
        if on_disk.is_file():
            found[PREFIX + "config.h"] = on_disk.read_bytes()
    return found


def needed(source: str, headers: dict[str, bytes]) -> dict[str, bytes] | None:
    """The MLX device headers `source` includes, directly or through them; None when one
    of them is not among `headers`."""
    want, todo = {}, list(_INCLUDE.findall(source))
    while todo:
        name = todo.pop()
        if name in want:
            continue
        if name not in headers:
            return None
        want[name] = headers[name]
        todo += _INCLUDE.findall(headers[name].decode("latin-1"))
    return want
