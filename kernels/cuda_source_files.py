"""A custom kernel's CUDA header and body handed to MLX as one `#include` line each.

Why: MLX 0.32's CUDA backend hashes a custom kernel's whole source (its default header,
our header, the signature and our body) at every launch, to name the module it looks up
(mlx/backend/cuda/custom_kernel.cpp, `CustomKernel::eval_gpu`: `std::hash` of the
source). Our sources run to 14 KB and a B=1 step launches a few hundred of them: ~1.4 MB
hashed a step, 4.5 % of the engine thread's samples on an H100 (session 41's py-spy) and
17 % on session 32's host. NVRTC opens an absolute `#include` path itself, in a header
and inside a function body alike (checked with NVRTC 13.5's library on the CPU machine),
so MLX hashes a line instead.

- A file's name holds a hash of its text: a changed source is a new name, hence a new
  module name for MLX's disk cache; a module compiled from older text is never found.
- MLX adds an input's `<name>_shape` / `_strides` / `_ndim` argument when the body holds
  that text (`build_kernel`); the short body names, in a comment, exactly the ones the
  real body holds, so the kernel's signature is the same.
- The files live beside MLX's compiled modules (kernel_seeding.mlx_cache_dir) and are
  written at build, atomically; `ensure` writes them again before a new instance compiles
  (a cache emptied while the app runs). Where the folder cannot be written, the sources go
  inline as before.
- TANDEM_CUDA_SOURCES=include | inline chooses; INCLUDE_BY_DEFAULT is the choice without
  it. On since session 44 (an H100): the kernel tests with the include form on passed
  (229: test_cuda_source_files, test_kernel_seeding's canary, attention_prep,
  gated_delta_step_norm, swiglu_joined, moe_route), and the bench with it was not slower
  than inline (alternating processes, 3 rounds each: B=1 4.6 / 4.7 / 4.3 ms a step
  against 4.8 / 5.2 / 4.6, B=16 9.3 / 9.2 / 9.3 against 9.7 / 8.9 / 9.4), where py-spy
  found std::_Hash_bytes in 5 % of the engine thread's samples with inline sources
  (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from kernels.cuda_jit_names import shape_names

log = logging.getLogger(__name__)

ENV_VAR = "TANDEM_CUDA_SOURCES"
INCLUDE_BY_DEFAULT = True
FOLDER = "tandem-src"


def _write(folder: Path, stem: str, text: str) -> Path:
    """`folder/<stem>-<hash of text>.cuh`, written unless it is there (a temp file then a
    rename: a concurrent reader sees the whole file or none)."""
    path = folder / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.cuh"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


class IncludedSource:
    """The (header, body) MLX gets for one kernel, and the files they include."""

    def __init__(self, name: str, header: str, body: str, input_names: list[str],
                 folder: Path):
        self._parts = ([(f"{name}-header", header)] if header else []) + [(f"{name}-body", body)]
        self._folder = folder
        paths = self.ensure()
        names = shape_names(body, input_names)
        self.body = (f"// MLX's signature reads: {' '.join(names)}\n" if names else "") + \
            f'#include "{paths[-1]}"\n'
        self.header = f'#include "{paths[0]}"\n' if header else ""

    def ensure(self) -> list[Path]:
        """Write the files that are missing; their paths."""
        return [_write(self._folder, stem, text) for stem, text in self._parts]


def wanted() -> bool:
    """Include lines unless TANDEM_CUDA_SOURCES says inline (or, unset, the default)."""
    choice = os.environ.get(ENV_VAR, "")
    return choice == "include" or (choice != "inline" and INCLUDE_BY_DEFAULT)


def included(name: str, header: str, body: str, input_names: list[str],
             folder: Path) -> IncludedSource | None:
    """The include form of a kernel's source, or None: inline wanted, or no folder."""
    if not wanted():
        return None
    try:
        return IncludedSource(name, header, body, input_names, folder / FOLDER)
    except OSError as e:
        log.info("CUDA sources stay inline: %s (%s)", folder / FOLDER, e)
        return None
