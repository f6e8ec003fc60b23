"""Tandem's CUDA kernels compiled beside MLX, in worker processes, into MLX's kernel cache.

Why: MLX 0.32 compiles a custom kernel with NVRTC in the process that first runs it and
never writes it to its disk cache (custom_kernel.cpp asks `get_jit_module` for no disk
cache), so every process compiled every kernel again, one at a time: on the H200 ~62 s of
self-test and ~40 s of warm-up in each start (docs/PERFORMANCE.md, "First start on CUDA").
But MLX *reads* that cache for custom kernels too (jit_module.cpp: `read_cached_ptx` comes
first, whatever the disk-cache flag). So each kernel instance this process meets is
compiled again here, by NVRTC with MLX's options and MLX's own headers, in up to 8 worker
processes at once (kernels/nvrtc_worker.py), and written under the module name MLX looks
for (kernels/cuda_jit_names.py). The next process loads them instead of compiling; in
this one, a module the workers finish before MLX reaches it is loaded too.

Checked on the machine before it is trusted: a canary kernel is written under the name
of one source with the code of another, then run through `mx.fast.cuda_kernel`. Only if
the other source's value comes back (MLX loaded the written module, so the names agree
and the code loads) is anything else written; otherwise nothing changes (MLX compiles
as before). `TANDEM_KERNEL_SEEDING=0` turns it off. CUDA only: Metal compiles its own.
The worker threads here never touch mx; `note` and `check` run on the engine thread.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import mlx.core as mx

from kernels.cuda_jit_names import kernel_name, module_name, module_path, wrap_source
from kernels.mlx_device_headers import embedded_headers, needed

log = logging.getLogger(__name__)
ENV_VAR = "TANDEM_KERNEL_SEEDING"
MAX_WORKERS = 8
GIVE_UP = 3          # failed compiles, with none done, after which seeding stops
_WORKER = Path(__file__).with_name("nvrtc_worker.py")
# Every part of MLX's wrapping: a shape argument, int, bool and dtype template constants.
_CANARY = ("tandem_seed_canary", "out[0] = T(x[0] + N + (B ? 1 : 0) + x_shape[0]);",
           "out[0] = T(x[0] + N + (B ? 1 : 0) + x_shape[0] + 36);")
_CANARY_TEMPLATE = (("N", 3), ("B", True), ("T", "float32"))


def _nvrtc_library(mlx_dir: Path) -> str | None:
    """The NVRTC this process's MLX loaded, else the one MLX's wheel depends on."""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1]
            if "/libnvrtc.so" in path and "builtins" not in path:
                return path
    except OSError:
        pass
    found = sorted((mlx_dir.parent / "nvidia").glob("*/lib/libnvrtc.so*"))
    return str(found[0]) if found else None


class Toolchain:
    """What NVRTC needs to compile as MLX does here (jit_module.cpp `compile`,
    `include_path_args`). Built on the engine thread (it asks mx for the GPU)."""

    def __init__(self, mlx_dir: Path, nvrtc: str, cc: tuple[int, int]):
        lib = ctypes.CDLL(nvrtc)
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.nvrtc = nvrtc
        self.cubin = (major.value, minor.value) >= (11, 8)   # MLX: SASS when NVRTC can
        arch = f"{'sm' if self.cubin else 'compute'}_{cc[0]}{cc[1]}{'a' if cc[0] >= 9 else ''}"
        include = mlx_dir / "include"
        runtime = mlx_dir.parent / "nvidia" / ("cu13" if major.value >= 13 else
                                               "cuda_runtime") / "include"
        if not runtime.exists():
            home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
            runtime = Path(home) / "include"
        paths = [p for p in (include, include / "cccl") if p.exists()] + [runtime]
        self.options = (["--device-as-default-execution-space", f"--gpu-architecture={arch}"]
                        + [f"--include-path={p}" for p in paths])
        self.headers = embedded_headers((mlx_dir / "lib" / "libmlx.so").read_bytes(), include)

    def identity(self) -> str:
        """What the written code depends on besides its source: NVRTC and its options
        (the GPU's architecture among them) and MLX's headers."""
        h = hashlib.sha256()
        for name, text in sorted(self.headers.items()):
            h.update(name.encode() + b"\0" + text + b"\0")
        return f"{self.nvrtc}|{' '.join(self.options)}|{mx.__version__}|{h.hexdigest()}"

    @classmethod
    def here(cls) -> Toolchain | None:
        mlx_dir = Path(mx.__file__).resolve().parent
        nvrtc = _nvrtc_library(mlx_dir)
        info = mx.device_info()
        cc = (int(info.get("compute_capability_major", 0)),
              int(info.get("compute_capability_minor", 0)))
        if nvrtc is None or cc[0] == 0 or not (mlx_dir / "lib" / "libmlx.so").exists():
            return None
        return cls(mlx_dir, nvrtc, cc)


def forget_other_builds(cache: Path, identity: str) -> None:
    """Remove the modules written for another GPU, NVRTC or MLX: their names would match
    (a name is its source's) but not their code. Every `custom_kernel_*` file there is
    ours: MLX writes none. The identity is kept beside them."""
    mark = cache / "tandem-seeding.txt"
    try:
        if mark.exists() and mark.read_text() == identity:
            return
        for top in cache.glob("custom_kernel_*"):     # long names are folders (module_path)
            for f in ([top] if top.is_file() else top.rglob("*")):
                if f.is_file():
                    f.unlink()
        cache.mkdir(parents=True, exist_ok=True)
        mark.write_text(identity)
    except OSError as e:
        log.info("kernel seeding: could not clear %s (%s)", cache, e)


def mlx_cache_dir() -> Path:
    """Where MLX reads compiled modules (jit_module.cpp `ptx_cache_dir`)."""
    folder = os.environ.get("MLX_PTX_CACHE_DIR")
    return Path(folder) if folder else Path(tempfile.gettempdir()) / "mlx" / mx.__version__ / "ptx"


class Seeder:
    """One per process (MLX's cache is): 'off' -> 'checking' (start) -> 'on' | 'failed'."""

    def __init__(self):
        self.state = "off"
        self.counts = {"compiled": 0, "found": 0, "failed": 0, "not seedable": 0}
        self.seconds = 0.0
        self._seen: set[str] = set()
        self._pending: list[tuple] = []
        self._jobs: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._canary: threading.Thread | None = None
        self._canary_ok = False
        self.tools: Toolchain | None = None
        self.cache = Path()
        self.dry = False          # kernels only note their instance (see dry_run)

    def start(self) -> None:
        """On the engine thread, once a process, before any kernel runs: find the toolchain
        and compile the canary in the background."""
        if self.state != "off" or os.environ.get(ENV_VAR, "1") == "0":
            return
        if getattr(sys, "frozen", False):   # a bundled app: sys.executable is not a Python
            self.state = "failed"
            return
        try:
            self.tools = Toolchain.here()
        except (OSError, ValueError, RuntimeError, AttributeError) as e:
            log.info("kernel seeding off: %s", e)
            self.tools = None
        if self.tools is None or "mlx/backend/cuda/device/utils.cuh" not in self.tools.headers:
            self.state = "failed"
            return
        self.cache = mlx_cache_dir()
        forget_other_builds(self.cache, self.tools.identity())
        self.state = "checking"
        self._canary = threading.Thread(target=self._seed_canary, daemon=True,
                                        name="kernel-seed-canary")
        self._canary.start()

    def check(self, timeout: float = 120.0) -> bool:
        """On the engine thread: run the canary; seeding goes on only if MLX loaded it."""
        if self.state != "checking":
            return self.state == "on"
        self._canary.join(timeout)
        ok = False
        if self._canary_ok:
            try:
                ok = self._canary_value() == 42.0
            except (RuntimeError, ValueError) as e:
                log.warning("kernel seeding off: the canary did not run (%s)", e)
        self.state = "on" if ok else "failed"
        if ok:
            for _ in range(min(MAX_WORKERS, max(1, (os.cpu_count() or 2) - 1))):
                threading.Thread(target=self._work, daemon=True, name="kernel-seed").start()
            for job in self._pending:
                self._jobs.put(job)
        else:
            log.info("kernel seeding off: MLX did not load the seeded canary")
        self._pending.clear()
        return ok

    @staticmethod
    def _canary_value() -> float:
        """The canary run by MLX: 6 from its own compile of the source, 42 from the
        module written under that source's name."""
        name, body, _ = _CANARY
        k = mx.fast.cuda_kernel(name=name, input_names=["x"], output_names=["out"],
                                source=body)
        return k(inputs=[mx.array([1.0])], output_shapes=[(1,)], output_dtypes=[mx.float32],
                 template=[(k, getattr(mx, v) if isinstance(v, str) else v)
                           for k, v in _CANARY_TEMPLATE],
                 grid=(1, 1, 1), threadgroup=(1, 1, 1))[0].item()

    def note(self, key: str, ingredients: tuple) -> None:
        """A kernel instance this process is about to run (engine thread)."""
        if self.state in ("off", "failed") or key in self._seen:
            return
        self._seen.add(key)
        if self.state == "on":
            self._jobs.put(ingredients)
        else:
            self._pending.append(ingredients)

    def wait_idle(self, timeout: float = 600.0) -> None:
        """Until every noted instance is compiled (a benchmark's timed runs should not
        share the CPU with the workers)."""
        end = time.monotonic() + timeout
        while self.state == "on" and self._jobs.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.1)

    @contextmanager
    def dry_run(self):
        """Kernels called inside note their instance and return zeros, running nothing:
        a pass that tells the workers what is coming (kernels/selftest.py)."""
        self.dry = True
        try:
            yield
        finally:
            self.dry = False

    def summary(self) -> str:
        c = self.counts
        return (f"kernel seeding {self.state}: {c['compiled']} compiled ahead "
                f"({self.seconds:.1f} s in workers), {c['found']} already cached, "
                f"{c['failed']} failed, {c['not seedable']} left to MLX")

    # -- worker side: no mx below ----------------------------------------------------

    def _seed_canary(self) -> None:
        name, body, other = _CANARY
        inputs, outputs, t = [("x", "float32", 1)], [("out", "float32")], _CANARY_TEMPLATE
        kname = kernel_name(name, t)
        module = module_name(kname, wrap_source(kname, "", body, inputs, outputs, t))
        if module_path(self.cache, module).exists():   # this build's (forget_other_builds)
            self._canary_ok = True
            return
        # "other" names x_shape as "body" does, so both get the same signature
        self._canary_ok = self._compile(wrap_source(kname, "", other, inputs, outputs, t),
                                        module, kname) == "compiled"

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                self._seed(job)
            finally:
                self._jobs.task_done()

    def _seed(self, ingredients: tuple) -> None:
        if self.state != "on":
            return
        name, header, body, inputs, outputs, template = ingredients
        kname = kernel_name(name, template)
        source = wrap_source(kname, header, body, inputs, outputs, template)
        module = module_name(kname, source)
        if module_path(self.cache, module).exists():
            self._count("found")
            return
        result = self._compile(source, module, kname)
        self._count("not seedable" if result == "not seedable" else
                    "failed" if result is None else "compiled")
        if self.counts["failed"] >= GIVE_UP and not self.counts["compiled"]:
            self.state = "failed"      # e.g. a cache folder it cannot write: stop trying

    def _compile(self, source: str, module: str, kname: str) -> str | None:
        headers = needed(source, self.tools.headers)
        if headers is None:
            return "not seedable"
        job = {"nvrtc": self.tools.nvrtc, "source": source, "module": module,
               "kernel": "mlx::core::cu::" + kname, "options": self.tools.options,
               "headers": {k: v.decode("latin-1") for k, v in headers.items()},
               "cubin": self.tools.cubin, "out": str(module_path(self.cache, module))}
        start = time.monotonic()
        try:
            run = subprocess.run([sys.executable, "-I", str(_WORKER)], input=json.dumps(job),
                                 capture_output=True, text=True, timeout=600)
            result = json.loads(run.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        with self._lock:
            self.seconds += time.monotonic() - start
        if not result["ok"]:
            log.warning("seeding %s failed: %s", module, result["error"][:500])
            return None
        return "compiled"

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1


SEEDER = Seeder()


def dtype_name(d: mx.Dtype) -> str:
    return str(d).rsplit(".", 1)[-1]
