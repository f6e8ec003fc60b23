"""One conversation's messages as a QAbstractListModel. Streamed text is
buffered and announced (dataChanged) at most every REPAINT_MS."""
from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, QModelIndex, QObject, Qt, QTimer

from app.storage.message import Message

REPAINT_MS = 66


class ChatModel(QAbstractListModel):
    MessageRole = Qt.ItemDataRole.UserRole + 1

    def __init__(self, messages: list[Message] | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self._messages: list[Message] = list(messages or [])
        self._dirty: set[int] = set()
        self._repaint = QTimer(self, singleShot=True, interval=REPAINT_MS)
        self._repaint.timeout.connect(self._on_repaint_timeout)

    # Qt overrides
    def rowCount(self, parent=None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self._messages)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._messages):
            return None
        msg = self._messages[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return msg.content
        if role == self.MessageRole:
            return msg
        return None

    # reading
    def message(self, row: int) -> Message:
        return self._messages[row]

    def messages(self) -> list[Message]:
        return list(self._messages)

    def last_row(self) -> int:
        return len(self._messages) - 1

    # editing
    def append(self, msg: Message) -> int:
        row = len(self._messages)
        self.beginInsertRows(QModelIndex(), row, row)
        self._messages.append(msg)
        self.endInsertRows()
        return row

    def replace(self, row: int, msg: Message) -> None:
        self._messages[row] = msg
        self._dirty.discard(row)
        index = self.index(row)
        self.dataChanged.emit(index, index)

    def truncate(self, row: int) -> None:
        """Remove `row` and everything after it."""
        if row >= len(self._messages):
            return
        self.beginRemoveRows(QModelIndex(), row, len(self._messages) - 1)
        del self._messages[row:]
        self.endRemoveRows()
        self._dirty = {r for r in self._dirty if r < row}

    def append_text(self, row: int, delta: str, num_tokens: int = 0) -> None:
        """Grow a streaming message; views hear about it on the next repaint tick."""
        msg = self._messages[row]
        msg.content += delta
        msg.num_tokens = (msg.num_tokens or 0) + num_tokens
        self._dirty.add(row)
        if not self._repaint.isActive():
            self._repaint.start()

    def flush(self) -> None:
        self._on_repaint_timeout()

    def _on_repaint_timeout(self) -> None:
        for row in sorted(self._dirty):
            if row < len(self._messages):
                index = self.index(row)
                self.dataChanged.emit(index, index)
        self._dirty.clear()
