"""The prompt cache folder's files as files: listing (never following links), the app's
usage and Clear, removing what a crashed writer left. No mlx."""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from engine.cache.disk_format import TMP_SUFFIX

SUFFIX = ".safetensors"
PREFIX = "v"                     # every file this cache writes starts with v{FORMAT}-
STALE_TMP_S = 3600               # a temporary file this old was left by a crashed writer


def list_files(folder: Path, include_odd: bool = False) -> list[tuple[Path, int, float]]:
    """(path, bytes, last use) of every entry file in the folder, any model or format.
    Links and folders named like entries are never followed (lstat); include_odd: list
    them too (the scan deletes them), with size 0."""
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        if name.startswith(PREFIX) and name.endswith(SUFFIX):
            try:
                st = os.lstat(folder / name)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((folder / name, st.st_size, st.st_mtime))
            elif include_odd:
                out.append((folder / name, 0, st.st_mtime))
    return out


def remove_stale_tmp(folder: Path) -> None:
    """Temporary files a crashed writer left (a live writer's are younger than an hour)."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(PREFIX) and n.endswith(TMP_SUFFIX)]
    except OSError:
        return
    for name in names:
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > STALE_TMP_S:
            unlink(folder / name)


def folder_usage(folder: str | os.PathLike) -> int:
    """Bytes the cache's files take (the app's Settings shows it)."""
    return sum(size for _, size, _ in list_files(Path(folder)))


def clear_folder(folder: str | os.PathLike) -> None:
    """Delete every cache file (the app's "Clear" button); a running engine treats the
    missing files as misses."""
    for path, _, _ in list_files(Path(folder)):
        unlink(path)


def unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
