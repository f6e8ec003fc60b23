"""Which model a disk cache entry belongs to: a hash of everything that changes its K/V
and states. No mlx (the cache layout comes in as text).

The weights are identified by their files' names, sizes and modification times (a
hash of gigabytes of weights at every load would cost seconds); the config, how the
weights are computed with (the quantization asked for at load time, and on the CPU
dense or quantized matmuls: their K/V differ in the last bits) and the cache layout
(layers, heads, dtypes, state shapes) are hashed whole. The format version is in the
file names (disk_cache.py), so it needs no place here.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from engine.cache.disk_cache import DiskCache
from engine.config import EngineConfig

MIB = 1 << 20
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".npz", ".bin")


def model_key(path: Path, config: dict, weights: str, layout: str) -> str | None:
    """The key, or None when the weights are not files (random benchmark weights).
    weights: how they are computed with (weights_mode)."""
    files = _weight_files(path)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    h.update(f"\n{weights}\nlayout={layout}".encode())
    return h.hexdigest()


def _weight_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())


def weights_mode(quantize_bits: int | None, cpu_weights: str) -> str:
    """The part of the key that says how the weights are computed with: the quantization
    asked for at load, and ModelBundle.weights' mode ("dense", "quantized", "as loaded")."""
    return f"quantize={quantize_bits}\nweights={cpu_weights}"


def open_disk_cache(config: EngineConfig, path: Path, model_config: dict,
                    weights: str, schema: dict, recurrent: bool,
                    notify: Callable[[str], None]) -> DiskCache | None:
    """The disk cache EngineConfig asks for, or None (off, no prefix cache to feed it,
    weights that are not files, or a folder that cannot be created: said by notify)."""
    if config.cache_dir is None or not config.prefix_cache:
        return None
    key = model_key(path, model_config, weights, repr(sorted(schema.items())))
    if key is None:
        return None
    try:
        return DiskCache(config.cache_dir, key, config.disk_cache_mb * MIB, notify,
                         prune_prefixes=not recurrent, schema=schema)
    except OSError as e:
        notify(f"The prompt cache folder {config.cache_dir} cannot be used ({e}); "
               "conversations work without it.")
        return None
