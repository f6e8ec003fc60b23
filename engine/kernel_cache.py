"""Where MLX keeps the kernels it compiles on CUDA: under the user's cache folder.

MLX compiles CUDA kernels with NVRTC the first time it meets a shape and keeps them
in a temporary folder unless MLX_PTX_CACHE_DIR says otherwise, so every reboot
compiled everything again (a first prefill took 15.7 s against 0.39 s warm). The
folder must be set before mlx is imported: ``engine/__init__.py`` calls this first.
A folder the user (or a test) already chose is kept. Plain Python: no mlx here.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_VAR = "MLX_PTX_CACHE_DIR"


def _tandem_cache() -> Path:
    import platformdirs
    return Path(platformdirs.user_cache_dir("Tandem", appauthor=False))


def kernel_cache_dir() -> Path:
    return _tandem_cache() / "mlx-cuda-kernels"


def selftest_verdict_dir() -> Path:
    """Where the kernels' self-test verdict is kept between starts (kernels/selftest_verdict.py:
    on CUDA the checks compile for about a minute in every process otherwise)."""
    return _tandem_cache() / "kernel-selftest"


def use_user_kernel_cache() -> None:
    """Point MLX's CUDA kernel cache at the user's cache folder, unless already set.
    Only Linux builds of MLX have the CUDA backend; elsewhere nothing is set."""
    if os.environ.get(ENV_VAR) or not sys.platform.startswith("linux"):
        return
    folder = kernel_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:          # a read-only home: MLX's temporary folder still works
        return
    os.environ[ENV_VAR] = str(folder)


def worker_kernel_cache(worker: str) -> Path:
    """A kernel cache folder of one test worker's own (pytest-xdist), seeded with a copy of
    the shared one: MLX writes a kernel's file in place, so two processes compiling into one
    folder could load each other's half-written files. Called before mlx is imported."""
    import shutil
    shared = Path(os.environ.get(ENV_VAR) or kernel_cache_dir())
    folder = shared.with_name(f"{shared.name}-{worker}")
    if not folder.exists() and shared.is_dir():
        shutil.copytree(shared, folder)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[ENV_VAR] = str(folder)
    return folder


def compiled_modules(folder: Path | None = None) -> set[str]:
    """The kernels MLX has compiled into a kernel cache folder (default: the one this
    process uses, MLX_PTX_CACHE_DIR), by name: a benchmark's before/after says what
    compiled in between. Empty where no folder is set or it does not exist."""
    if folder is None:
        env = os.environ.get(ENV_VAR)
        if not env:
            return set()
        folder = Path(env)
    return {p.stem for p in folder.rglob("*.ptx")} if folder.exists() else set()
