"""One Tandem per data folder: an OS lock on `tandem.lock`, holding the owner's pid.

Two instances on one database interleave their conversations and mark each other's
live replies as interrupted (issue 17 item 10). The lock is the OS's (flock on POSIX,
msvcrt on Windows): it goes away with the process, even after kill -9, so a stale
file never keeps Tandem from starting. No Qt here.
"""
from __future__ import annotations

import os
from pathlib import Path

LOCK_NAME = "tandem.lock"


class AlreadyRunningError(Exception):
    """Another Tandem holds the data folder."""

    def __init__(self, folder: Path, pid: int | None):
        self.folder, self.pid = folder, pid
        who = f"process {pid}" if pid else "another process"
        super().__init__(
            f"Tandem is already running with the data folder {folder} ({who}). Use that "
            "window, or start this one with another folder: python -m app --data-dir FOLDER.")


class InstanceLock:
    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK_NAME
        self._file = None

    def acquire(self) -> None:
        """Raises AlreadyRunningError if held elsewhere, OSError if the folder cannot be
        written (the caller then runs without a lock, in memory)."""
        f = open(self.path, "a+")
        try:
            _lock(f)
        except OSError:
            f.seek(0)
            text = f.read().strip()
            f.close()
            raise AlreadyRunningError(self.path.parent,
                                      int(text) if text.isdigit() else None) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            self._file.close()        # closing the file drops the lock
            self._file = None


if os.name == "nt":
    import msvcrt

    def _lock(f) -> None:
        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
else:
    import fcntl

    def _lock(f) -> None:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
