"""Kept turns on disk, so a conversation resumes without re-reading its history after a
restart. Numpy and file I/O only, no mlx.

The cache manager (cache_manager.py) is the only caller on the engine thread: it asks
``match`` for the longest entry a prompt starts with and ``load`` for its arrays, and
hands ``save`` the arrays of a kept turn (gathered from the pool by the runner, copied
to numpy on the engine thread). A writer thread does the file work only: writing,
then least-recently-used eviction down to the byte budget. Files are
``v{FORMAT}-{model key[:16]}-{hash of the ids}.safetensors`` (disk_format.py): files of
another format are deleted, files of another model are kept for it but never read,
and a file that fails its checks is deleted and treated as a miss.
"""
from __future__ import annotations

import errno
import hashlib
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# clear_folder, folder_usage and list_files are re-exported: the app and tests use them.
from engine.cache.disk_folder import (  # noqa: F401
    PREFIX,
    SUFFIX,
    clear_folder,
    folder_usage,
    list_files,
    remove_stale_tmp,
)
from engine.cache.disk_folder import unlink as _unlink
from engine.cache.disk_format import (
    FORMAT_VERSION,
    BadEntry,
    Tensor,
    read_entry,
    read_ids,
)
from engine.cache.disk_format import write_entry as _write_entry


@dataclass(frozen=True, eq=False)
class DiskEntry:
    name: str
    ids: np.ndarray              # int32 [n]
    size: int

    @property
    def num_tokens(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class DiskPayload:
    """An entry read back for a prompt: its first `num_tokens` tokens' arrays."""
    num_tokens: int
    tensors: dict[str, Tensor]   # as stored (kv.* cut to num_tokens)


class DiskCache:
    def __init__(self, folder: str | os.PathLike, model_key: str, budget_bytes: int,
                 notify: Callable[[str], None] = lambda message: None,
                 prune_prefixes: bool = False,
                 schema: dict[str, tuple[str, tuple[int, ...]]] | None = None):
        """notify(message) is called from the writer thread when writing stops.
        prune_prefixes: an entry whose ids start a newly written one is deleted (models
        that reuse any common prefix: the longer entry serves every prompt it would).
        schema: each tensor's (dtype code, shape without the token axis) a file must
        have to be read into this model's cache (None: not checked)."""
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.model_key = model_key
        self.budget_bytes = budget_bytes
        self.notify = notify
        self.prune_prefixes = prune_prefixes
        self.schema = schema
        self.writing = True
        self._prefix = f"{PREFIX}{FORMAT_VERSION}-{model_key[:16]}-"
        self._lock = threading.Lock()
        self._entries: dict[str, DiskEntry] = {}      # this model's files by name
        self._queued: set[str] = set()
        self._jobs: queue.Queue = queue.Queue()
        self._reported: set[str] = set()              # bad files already told about
        self._scan()
        self._writer = threading.Thread(target=self._write_loop, name="tandem-disk-cache",
                                        daemon=True)
        self._writer.start()

    # -- the engine thread's side ---------------------------------------------------
    def match(self, ids: list[int], exact_only: bool) -> tuple[DiskEntry | None, int]:
        """The entry sharing the longest prefix with `ids` (whole entries only when
        exact_only), leaving at least one token to read."""
        limit = len(ids) - 1
        if limit < 1 or not self._entries:
            return None, 0
        prompt = np.asarray(ids[:limit], np.int32)
        best, best_n = None, 0
        with self._lock:
            entries = list(self._entries.values())
        for e in entries:
            n = _common_prefix(e.ids, prompt)
            if exact_only and n < e.num_tokens:
                continue
            if n > best_n:
                best, best_n = e, n
        return best, best_n

    def load(self, entry: DiskEntry, num_tokens: int) -> DiskPayload | None:
        """The entry's arrays for its first num_tokens tokens, or None (the file is gone or
        bad: a bad one is deleted). A hit counts as a use for the LRU order."""
        path = self.folder / entry.name
        try:
            tensors = read_entry(str(path), self.model_key)
            stored = tensors.get("ids")
            if stored is None or not np.array_equal(stored.array, entry.ids):
                raise BadEntry("ids differ from the index")
            self._check_schema(tensors, entry.num_tokens)
        except BadEntry as e:
            gone = not os.path.lexists(path)      # deleted (Clear, another process): a miss
            self._drop(entry.name, delete=not gone)
            if not gone:
                self._report_bad([(entry.name, str(e))])
            return None
        _touch(path)
        cut = {k: (Tensor(t.code, t.array[:num_tokens]) if k.startswith("kv.") else t)
               for k, t in tensors.items() if k != "ids"}
        return DiskPayload(num_tokens, cut)

    def _check_schema(self, tensors: dict[str, Tensor], num_tokens: int) -> None:
        if self.schema is None:
            return
        if set(tensors) - {"ids"} != set(self.schema):
            raise BadEntry("its tensors are not this model's cache layout")
        for name, (code, shape) in self.schema.items():
            t = tensors[name]
            want = (num_tokens, *shape) if name.startswith("kv.") else shape
            if t.code != code or tuple(t.array.shape) != want:
                raise BadEntry(f"tensor {name!r} has the wrong shape or dtype")

    def has(self, ids: tuple[int, ...]) -> bool:
        """Written or queued (a file deleted behind the index, by Settings' Clear, is not)."""
        name = self.name_for(ids)
        with self._lock:
            if name in self._queued:
                return True
            known = name in self._entries
        if known and not (self.folder / name).exists():
            self._drop(name, delete=False)
            return False
        return known

    def save(self, ids: tuple[int, ...], tensors: dict[str, Tensor]) -> None:
        """Queue a kept turn's arrays (numpy copies: the writer never touches mx)."""
        name = self.name_for(ids)
        if sum(t.array.nbytes for t in tensors.values()) > self.budget_bytes:
            return                      # would evict everything else and still not fit
        with self._lock:
            if not self.writing or name in self._queued or name in self._entries:
                return
            self._queued.add(name)
        tensors = {"ids": Tensor("I32", np.asarray(ids, np.int32)), **tensors}
        self._jobs.put((name, tensors))

    def name_for(self, ids: tuple[int, ...]) -> str:
        digest = hashlib.blake2b(np.asarray(ids, np.int32).tobytes(), digest_size=16)
        return f"{self._prefix}{digest.hexdigest()}{SUFFIX}"

    @property
    def num_entries(self) -> int:
        return len(self._entries)

    def close(self, timeout: float = 30.0) -> None:
        """Finish queued writes (up to timeout seconds), then stop the writer."""
        self._jobs.put(None)
        self._writer.join(timeout)

    def wait(self) -> None:
        """Block until every queued write is done (tests, benchmarks)."""
        self._jobs.join()

    # -- the writer thread ------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                self._write(*job)
            finally:
                self._jobs.task_done()

    def _write(self, name: str, tensors: dict[str, Tensor]) -> None:
        path = self.folder / name
        try:
            size = 0 if not self.writing else self._write_file(path, tensors)
        except OSError as e:
            self._stop_writing(e)
            size = 0
        with self._lock:
            self._queued.discard(name)
            if size:
                self._entries[name] = DiskEntry(name, tensors["ids"].array, size)
        if size:
            if self.prune_prefixes:
                self._prune(tensors["ids"].array, keep=name)
            self._evict(keep=name)

    def _write_file(self, path: Path, tensors: dict[str, Tensor]) -> int:
        try:
            return write_entry(str(path), tensors, self.model_key)
        except FileNotFoundError:
            if self.folder.is_dir():
                raise
        # The folder was deleted while the engine runs: make it again, forget its files.
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._entries.clear()
        return write_entry(str(path), tensors, self.model_key)

    def _report_bad(self, bad: list[tuple[str, str]]) -> None:
        """Say once which files were dropped (each file is told about once)."""
        new = [(n, why) for n, why in bad if n not in self._reported]
        if not new:
            return
        self._reported.update(n for n, _ in new)
        name, why = new[0]
        more = f" and {len(new) - 1} more" if len(new) > 1 else ""
        self.notify(f"The prompt cache folder {self.folder} had damaged files, deleted "
                    f"and not used ({name}: {why}{more}); those prompts are read in full.")

    def _prune(self, ids: np.ndarray, keep: str) -> None:
        with self._lock:
            shorter = [e.name for e in self._entries.values() if e.name != keep
                       and e.num_tokens <= len(ids) and _common_prefix(e.ids, ids) == e.num_tokens]
        for name in shorter:
            self._drop(name, delete=True)

    def _stop_writing(self, e: OSError) -> None:
        self.writing = False
        full = e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
        why = "the disk is full" if full else f"it cannot be written ({e.strerror or e})"
        self.notify(f"The prompt cache folder {self.folder} is no longer written to: {why}. "
                    "Conversations still work; free some space or clear the cache in "
                    "Settings, then reload the model to cache again.")

    def _evict(self, keep: str) -> None:
        """Delete least recently used files (of any model) until the folder fits the budget."""
        files = list_files(self.folder)
        total = sum(size for _, size, _ in files)
        for path, size, _ in sorted(files, key=lambda f: f[2]):
            if total <= self.budget_bytes:
                break
            if path.name == keep:
                continue
            self._drop(path.name, delete=True)
            total -= size

    # -- the index ----------------------------------------------------------------------
    def _scan(self) -> None:
        """Index this model's files; delete files of another format and bad ones."""
        bad = []
        for path, _, _ in list_files(self.folder, include_odd=True):
            if not path.name.startswith(f"{PREFIX}{FORMAT_VERSION}-"):
                _unlink(path)                      # another format version: never usable
            elif path.name.startswith(self._prefix):
                try:
                    ids, size = read_ids(str(path), self.model_key)
                except BadEntry as e:
                    _unlink(path)                  # a link goes, never what it points to
                    bad.append((path.name, str(e)))
                    continue
                self._entries[path.name] = DiskEntry(path.name, ids, size)
        remove_stale_tmp(self.folder)
        self._report_bad(bad)

    def _drop(self, name: str, delete: bool) -> None:
        with self._lock:
            self._entries.pop(name, None)
        if delete:
            _unlink(self.folder / name)


def write_entry(path: str, tensors: dict[str, Tensor], model_key: str) -> int:
    """The writer's one file operation (tests replace it to simulate a full disk)."""
    return _write_entry(path, tensors, model_key)


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass
