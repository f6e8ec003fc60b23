"""An optimized BLAS for MLX's Linux CPU backend, loaded before MLX.

MLX's Linux CPU wheel links a bundled reference BLAS (about 5 GFLOP/s for the
built-in model's matmuls on a laptop core). libmlx.so resolves ``cblas_sgemm``
through the process's global symbol scope first, so a library opened with
RTLD_GLOBAL *before* MLX is imported takes those calls over. We use Intel MKL's
single dynamic library from the PyPI ``mkl`` wheel (standard ``cblas_*`` names,
nothing to compile; Intel Simplified Software License): 10-50x the reference BLAS
here (docs/bench/HISTORY.md, "CPU").

Checked twice, falling back to MLX's own BLAS with the reason recorded:
- before binding: the library's own ``cblas_sgemm`` (through ctypes) against numpy;
  only then is it promoted to the global scope;
- after MLX loads (``blas_info()``, on the engine thread): that ``cblas_sgemm`` is
  what the process resolves, and an MLX float32 matmul agrees with numpy.

Nothing happens on macOS (MLX uses Accelerate and Metal) nor on other Linux CPUs the
wheel does not serve. ``TANDEM_CPU_BLAS=off`` keeps the reference BLAS (A/B benchmarks);
``TANDEM_CPU_BLAS=/path/libX.so`` tries another library with standard cblas names.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import platform
import sys
from dataclasses import dataclass, replace

ENV_VAR = "TANDEM_CPU_BLAS"
REFERENCE = "MLX bundled reference BLAS"
MKL_LIB = "libmkl_rt.so.3"
# MKL's OpenMP layer on every core this process may use. Its threads spin for at most
# KMP_BLOCKTIME ms after each call, then sleep: back-to-back decode steps keep them
# awake, an idle app does not burn power. Passive waits (sleep at once) made every small
# matmul pay a thread wake-up: MLX's CPU attention for 120+ keys went from 0.3 to 9 ms
# and 8 conversations of different lengths decoded at 27 tok/s instead of 57; the
# sequential layer gave 43 (idle 2-core machine; docs/bench/HISTORY.md). A user's own
# MKL_* / OMP_* / KMP_* settings win.
MKL_THREADING = "INTEL"
SPIN_MS = "5"


def _set_threading() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault("MKL_THREADING_LAYER", MKL_THREADING)
    os.environ.setdefault("MKL_NUM_THREADS", str(cores or 1))
    os.environ.setdefault("KMP_BLOCKTIME", SPIN_MS)


@dataclass(frozen=True)
class BlasInfo:
    """Which BLAS MLX's dense CPU matmuls use, as the engine reports it."""
    name: str                 # "Intel MKL 2026.2" or REFERENCE
    path: str = ""            # the library file, "" for the reference BLAS
    reason: str = ""          # why the reference BLAS is used (empty when optimized)
    checked: bool = False     # the after-MLX self-check ran

    @property
    def optimized(self) -> bool:
        return bool(self.path) and not self.reason

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "path": self.path, "reason": self.reason}


_info: BlasInfo | None = None
_handle: ctypes.CDLL | None = None


def preload_cpu_blas(path: str | None = None) -> BlasInfo:
    """Open the optimized BLAS with RTLD_GLOBAL; call before anything imports mlx.
    Idempotent: the first call decides for the whole process."""
    global _info, _handle
    if _info is not None:
        return _info
    _info, _handle = _try_load(path or os.environ.get(ENV_VAR, ""))
    return _info


def _try_load(choice: str) -> tuple[BlasInfo, ctypes.CDLL | None]:
    if sys.platform == "darwin":
        return BlasInfo("Accelerate (macOS)", reason="macOS: MLX uses Accelerate"), None
    if choice.lower() in ("off", "0", "reference"):
        return BlasInfo(REFERENCE, reason=f"{ENV_VAR}={choice}"), None
    if "mlx.core" in sys.modules:
        return BlasInfo(REFERENCE, reason="mlx was imported before the engine"), None
    path = choice or _mkl_path()
    if not path:
        return BlasInfo(REFERENCE, reason=_missing_reason()), None
    _set_threading()
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        problem = _sgemm_problem(lib.cblas_sgemm)
    except (OSError, AttributeError) as e:
        return BlasInfo(REFERENCE, reason=f"cannot load {path}: {e}"), None
    if problem:
        return BlasInfo(REFERENCE, reason=f"{path} failed its self-check: {problem}"), None
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)   # promote: MLX binds to it
    return BlasInfo(_library_name(lib, path), path), lib


def _mkl_path() -> str:
    if platform.machine() not in ("x86_64", "AMD64"):
        return ""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        return ""
    for f in files:
        if f.name == MKL_LIB:
            return str(f.locate().resolve())
    return ""


def _missing_reason() -> str:
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"no optimized BLAS package for {platform.machine()} Linux"
    return "the mkl package is not installed (pip install mkl)"


def _library_name(lib: ctypes.CDLL, path: str) -> str:
    try:
        buf = ctypes.create_string_buffer(256)
        lib.mkl_get_version_string(buf, len(buf))
    except AttributeError:
        return os.path.basename(path)
    # 'Intel(R) oneAPI Math Kernel Library Version 2026.2-Product Build …' -> 'Intel MKL 2026.2'
    text = buf.value.decode(errors="replace")
    version = text.partition("Version ")[2].split("-")[0].split()
    return f"Intel MKL {version[0]}" if version else text.strip()


def _sgemm_problem(sgemm) -> str:
    """'' when the library's cblas_sgemm computes a [5, 7] @ [7, 3] product right."""
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    c = np.zeros((5, 3), np.float32)
    ptr = ctypes.POINTER(ctypes.c_float)
    row_major, no_trans, i, f = 101, 111, ctypes.c_int, ctypes.c_float
    sgemm.argtypes = [i, i, i, i, i, i, f, ptr, i, ptr, i, f, ptr, i]
    sgemm.restype = None
    sgemm(row_major, no_trans, no_trans, 5, 3, 7, 1.0, a.ctypes.data_as(ptr), 7,
          b.ctypes.data_as(ptr), 3, 0.0, c.ctypes.data_as(ptr), 3)
    return _compare(c, a.astype(np.float64) @ b.astype(np.float64))


def _compare(got, want) -> str:
    import numpy as np
    err = float(np.abs(got - want).max())
    # float32 rounding of a length-K dot product stays well under K * eps * |a||b|
    return "" if err <= 1e-4 * max(1.0, float(np.abs(want).max())) else f"max error {err:.3g}"


def blas_info() -> BlasInfo:
    """The BLAS in use; the first call after MLX is imported runs the after-load check."""
    global _info
    info = preload_cpu_blas()
    if info.checked or not info.path:
        return info
    problem = _binding_problem() or _mlx_problem()
    _info = replace(info, checked=True,
                    reason=f"loaded but the self-check failed: {problem}" if problem else "")
    return _info


def _binding_problem() -> str:
    """'' when the process resolves cblas_sgemm into the preloaded library's folder
    (MKL's single dynamic library forwards to its own layer libraries beside it)."""
    resolved = _library_of(ctypes.CDLL(None).cblas_sgemm)
    if os.path.dirname(resolved) == os.path.dirname(_info.path):
        return ""
    return f"cblas_sgemm resolves to {resolved or 'an unknown library'}"


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


def _library_of(function) -> str:
    """The file a loaded function lives in (dladdr)."""
    info = _DlInfo()
    address = ctypes.cast(function, ctypes.c_void_p)
    if not ctypes.CDLL(None).dladdr(address, ctypes.byref(info)) or not info.fname:
        return ""
    return os.path.realpath(info.fname.decode(errors="replace"))


def _mlx_problem() -> str:
    """'' when an MLX float32 matmul on the CPU agrees with numpy's float64 product."""
    import mlx.core as mx
    import numpy as np
    rng = np.random.default_rng(1)
    a = rng.standard_normal((33, 64)).astype(np.float32)   # [M, K]
    b = rng.standard_normal((64, 48)).astype(np.float32)   # [K, N]
    with mx.stream(mx.cpu):
        c = mx.matmul(mx.array(a), mx.array(b))
        mx.eval(c)
    return _compare(np.array(c), a.astype(np.float64) @ b.astype(np.float64))
