"""Compile one custom kernel's module with NVRTC and write it where MLX reads it.

Run as a script (``python kernels/nvrtc_worker.py`` with one JSON job on stdin), never
imported through the kernels package: it must not import mlx (a second process with a
CUDA context), only NVRTC through ctypes. kernels/kernel_seeding.py runs several at once.

The job: "nvrtc" (the library's path), "source" (the wrapped source MLX would compile,
kernels/cuda_jit_names.py), "module" (its name), "kernel" (the name MLX asks NVRTC to
lower), "headers" ({include name: text as latin-1}), "options" (MLX's NVRTC options),
"cubin" (MLX keeps SASS when NVRTC can make it for the GPU, else PTX), "out" (the
module's `.ptx` path). Written as MLX's own `write_cached_ptx` writes (jit_module.cpp):
the code in `<module>.ptx`, "name<TAB>mangled" in `<module>.txt`, the source in
`<module>.cu`. MLX may read the folder while this writes, so each file appears whole
(written aside, then renamed), `.txt` before `.ptx`: MLX opens `.txt` once it has found
`.ptx`. Prints one JSON line: {"ok": bool, "error": str, "seconds": float}.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path


def _check(lib, result: int, what: str) -> None:
    if result != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{what}: {lib.nvrtcGetErrorString(result).decode()}")


def compile_module(job: dict) -> tuple[bytes, str]:
    """(the module's code, the kernel's mangled name)."""
    lib = ctypes.CDLL(job["nvrtc"])
    names = [n.encode() for n in job["headers"]]
    texts = [t.encode("latin-1") for t in job["headers"].values()]
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(
        ctypes.byref(prog), job["source"].encode(), (job["module"] + ".cu").encode(),
        len(names), (ctypes.c_char_p * len(texts))(*texts),
        (ctypes.c_char_p * len(names))(*names)), "nvrtcCreateProgram")
    try:
        kernel = job["kernel"].encode()
        _check(lib, lib.nvrtcAddNameExpression(prog, kernel), "nvrtcAddNameExpression")
        options = [o.encode() for o in job["options"]]
        result = lib.nvrtcCompileProgram(prog, len(options),
                                         (ctypes.c_char_p * len(options))(*options))
        if result != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            raise RuntimeError("compile failed: " + log.value.decode(errors="replace")[:2000])
        mangled = ctypes.c_char_p()
        _check(lib, lib.nvrtcGetLoweredName(prog, kernel, ctypes.byref(mangled)),
               "nvrtcGetLoweredName")
        size = ctypes.c_size_t()
        get_size, get = ((lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if job["cubin"]
                         else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX))
        _check(lib, get_size(prog, ctypes.byref(size)), "getting the code's size")
        code = ctypes.create_string_buffer(size.value)
        _check(lib, get(prog, code), "getting the code")
        return code.raw, mangled.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _write_whole(path: Path, data: bytes) -> None:
    aside = path.with_name(f"{path.name}.{os.getpid()}.part")
    aside.write_bytes(data)
    os.replace(aside, path)


def write_module(out: Path, code: bytes, kernel: str, mangled: str, source: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_whole(out.with_suffix(".cu"), source.encode())
    _write_whole(out.with_suffix(".txt"), f"{kernel}\t{mangled}\n".encode())
    _write_whole(out, code)


def main() -> int:
    start = time.monotonic()
    job = json.loads(sys.stdin.read())
    try:
        code, mangled = compile_module(job)
        write_module(Path(job["out"]), code, job["kernel"], mangled, job["source"])
        result = {"ok": True, "error": ""}
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    result["seconds"] = round(time.monotonic() - start, 3)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
