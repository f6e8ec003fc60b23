"""The store's writes, never raising: what the disk refuses waits in memory, in
order, and is retried until it is saved (issue 17 item 9: disk full while streaming).

A failed write is queued with every write after it (order matters: a message is
inserted before it is updated, a regenerate's truncation before the new reply), so
the database never holds a later state before an earlier one. Repeated writes of
one message or one setting are coalesced: the queued write saves the latest state
when it runs. Reads go straight to the store.

Signals:
    failed(str): writes started failing (once, until they recover); the reason
    recovered(): every queued write is saved
"""
from __future__ import annotations

import sqlite3
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

RETRY_MS = 2000


class StoreGuard(QObject):
    failed = Signal(str)
    recovered = Signal()

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self._store = store
        self._queue: list[tuple[object, Callable[[], None]]] = []
        self.failure = ""         # the disk's last refusal, "" while writes succeed
        self._retry = QTimer(self, interval=RETRY_MS)
        self._retry.timeout.connect(self.flush)

    def __getattr__(self, name):          # reads (and anything not guarded)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._store, name)

    @property
    def num_unsaved(self) -> int:
        return len(self._queue)

    # guarded writes
    def add_message(self, conv_id: int, position: int, msg) -> int | None:
        def add():
            msg.id = self._store.add_message(conv_id, position, msg)
        self._write(("message", id(msg)), add)
        return msg.id

    def update_message(self, msg) -> None:
        # Queued behind its own insert when that is still waiting (its id comes then).
        self._write(("message", id(msg)), lambda: self._store.update_message(msg),
                    coalesce=True)

    def truncate_messages(self, conv_id: int, position: int) -> None:
        self._write(None, lambda: self._store.truncate_messages(conv_id, position))

    def update_conversation(self, conv) -> None:
        self._write(("conversation", conv.id), lambda: self._store.update_conversation(conv),
                    coalesce=True, latest=True)

    def delete_conversation(self, conv_id: int) -> None:
        self._write(None, lambda: self._store.delete_conversation(conv_id))

    def touch_conversation(self, conv_id: int) -> None:
        self._write(None, lambda: self._store.touch_conversation(conv_id))

    def set_setting(self, key: str, value) -> None:
        self._write(("setting", key), lambda: self._store.set_setting(key, value),
                    coalesce=True, latest=True)

    def flush(self) -> bool:
        """Save what waits, in order; True when nothing waits any more."""
        while self._queue:
            try:
                self._queue[0][1]()
            except sqlite3.Error as e:     # disk full, I/O error, read-only file
                self._fail(str(e))
                return False
            self._queue.pop(0)
        if self.failure:
            self.failure = ""
            self._retry.stop()
            self.recovered.emit()
        return True

    # internals
    def _write(self, key, fn: Callable[[], None], coalesce: bool = False,
               latest: bool = False) -> None:
        """latest: the closure holds a value (not a live object): the new one replaces
        the queued one in place."""
        if coalesce and key is not None:
            for i, (k, _) in enumerate(self._queue):
                if k == key:
                    if latest:
                        self._queue[i] = (key, fn)
                    return
        self._queue.append((key, fn))
        self.flush()

    def _fail(self, reason: str) -> None:
        if not self.failure:
            self.failure = reason or "the database cannot be written"
            self._retry.start()
            self.failed.emit(self.failure)
        self.failure = reason or self.failure
