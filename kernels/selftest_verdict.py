"""The self-test's verdict kept on disk, so a model's load runs it once per machine and code.

On CUDA the self-test compiles every kernel it checks with NVRTC, and MLX 0.32 never
keeps a custom kernel's compiled code on disk (its CustomKernel asks `get_jit_module`
for no disk cache: mlx/backend/cuda/custom_kernel.cpp), so each process compiled them
again: on the H200, 62 s of a 109 s start (session 21, py-spy around the concurrency
bench: `run_selftest` under `load_bundle`, nearly all of it `nvrtcCompileProgram`).

The verdict (which kernels passed, their errors) is a fact about this code on this
device, this driver and this MLX, so it is keyed by exactly those: the bytes of every
module in kernels/ (sources, references, the checks and their tolerance), MLX's version,
the backend, the GPU's name and architecture, and the driver (Linux: NVIDIA's driver
version; macOS, whose Metal compiler ships with the system: the OS version). Any change
runs the self-test again. A run in which a check raised (a kernel that did not build,
say, or memory that ran out at load) is not kept: it may not happen again.
`python -m kernels.selftest` always runs the checks.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx

PREFIX = "selftest-"
_KERNELS_DIR = Path(__file__).resolve().parent


def driver_version() -> str:
    """The GPU driver's version where the system says it, else ''."""
    if sys.platform == "darwin":
        return "macOS " + platform.mac_ver()[0]
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return ""


def device_identity() -> str:
    """The GPU's name and architecture as MLX reports them (not its free memory)."""
    try:
        info = mx.device_info()
    except (AttributeError, RuntimeError, ValueError):
        return ""
    return " ".join(str(info.get(k, "")) for k in ("device_name", "architecture"))


def verdict_key(backend: str, sources_dir: Path = _KERNELS_DIR) -> str:
    """sha256 of everything the verdict depends on (module docstring)."""
    h = hashlib.sha256()
    for path in sorted(sources_dir.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for part in (mx.__version__, backend, device_identity(), driver_version()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _raised(results: dict) -> bool:
    return any((r.get("reason") or "").startswith("self-test raised") for r in results.values())


def cached_selftest(run: Callable[[], dict], backend: str, folder: Path,
                    key: str | None = None) -> dict:
    """run()'s results, from `folder` when a run with this key was kept there; else run
    it and keep the results (unless a check raised). A file that cannot be read or
    written only costs a run."""
    key = key or verdict_key(backend)
    path = Path(folder) / f"{PREFIX}{key[:32]}.json"
    try:
        kept = json.loads(path.read_text())
        if kept.get("key") == key and isinstance(kept.get("results"), dict):
            return kept["results"]
    except (OSError, ValueError):
        pass
    results = run()
    if not _raised(results):
        _keep(path, {"key": key, "checked": time.strftime("%Y-%m-%d %H:%M:%S"),
                     "results": results})
    return results


def _keep(path: Path, record: dict) -> None:
    """Write atomically; drop verdicts of other keys (other code, MLX or driver)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".selftest-")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
        for old in path.parent.glob(f"{PREFIX}*.json"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass
