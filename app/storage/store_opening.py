"""Open the data folder's store whatever state the folder is in (issue 17 items 8, 10).

- Another Tandem holds the folder: AlreadyRunningError (the app says so and exits).
- The database is damaged (random bytes, overwritten pages): the file is moved aside
  (never deleted) as tandem.sqlite3.corrupt-<time>, with its -wal/-shm, and a fresh
  database starts; `notice` says where the old one went.
- The folder (or the database file) cannot be written: the store runs in memory, with
  what could be read of the old database; `banner` says nothing will be saved.
No Qt here: app/__main__.py shows the notice and the banner.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from app.storage.instance_lock import AlreadyRunningError, InstanceLock
from app.storage.store import DB_NAME, Store, StoreCorruptError, is_corruption

__all__ = ["AlreadyRunningError", "OpenedStore", "open_store"]


@dataclass
class OpenedStore:
    store: Store
    lock: InstanceLock | None
    notice: str = ""      # once, in a dialog
    banner: str = ""      # for the whole session

    def close(self) -> None:
        self.store.close()
        if self.lock is not None:
            self.lock.release()


def open_store(folder: Path) -> OpenedStore:
    folder = Path(folder)
    lock = InstanceLock(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except AlreadyRunningError:
        raise
    except OSError as e:
        return _in_memory(folder, None, f"the folder cannot be written ({e.strerror or e})")
    try:
        return OpenedStore(Store(folder), lock)
    except (StoreCorruptError, sqlite3.Error) as e:
        if not isinstance(e, StoreCorruptError) and not is_corruption(e):
            return _in_memory(folder, lock, f"the database cannot be written ({e})")
        moved = move_aside(folder / DB_NAME)
        notice = (f"Tandem's history database was damaged ({e}) and was moved aside to\n"
                  f"{moved}\nTandem started with a new, empty history. The damaged file "
                  "was kept: a recovery tool (sqlite3 .recover) may get old chats back.")
    try:
        return OpenedStore(Store(folder), lock, notice=notice)
    except sqlite3.Error as e:
        return _in_memory(folder, lock, f"a new database cannot be written ({e})", notice)


def move_aside(path: Path) -> Path:
    """Rename the database and its WAL/shm files to <name>.corrupt-<time>[-wal|-shm]."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    path.rename(target)
    return target


def _in_memory(folder: Path, lock: InstanceLock | None, why: str, notice: str = ""
               ) -> OpenedStore:
    banner = (f"Read-only: {why}, so this session is kept in memory only ({folder}). "
              "Chats you write now are lost when Tandem quits.")
    return OpenedStore(Store(folder, in_memory=True), lock, notice=notice, banner=banner)
