"""Saved conversations for the sidebar, newest first, filtered by a search;
titles are editable in place (rename)."""
from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, Qt, Signal

from app.storage.conversation import Conversation


class ConversationListModel(QAbstractListModel):
    """Signals:
        renamed(int, str): conversation id, new title
    """
    renamed = Signal(int, str)
    IdRole = Qt.ItemDataRole.UserRole + 1
    SnippetRole = Qt.ItemDataRole.UserRole + 2
    ConversationRole = Qt.ItemDataRole.UserRole + 3
    OpenRole = Qt.ItemDataRole.UserRole + 4       # shown in a pane now

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self._store = store
        self._items: list[Conversation] = []
        self._open: frozenset[int] = frozenset()
        self.search = ""

    def refresh(self, search: str | None = None) -> None:
        if search is not None:
            self.search = search
        self.beginResetModel()
        self._items = self._store.conversations(self.search)
        self.endResetModel()

    def set_open_ids(self, ids) -> None:
        """The conversations shown in panes (the sidebar marks them)."""
        ids = frozenset(ids)
        if ids != self._open:
            self._open = ids
            if self._items:
                self.dataChanged.emit(self.index(0), self.index(len(self._items) - 1))

    def row_of(self, conv_id: int) -> int:
        return next((i for i, c in enumerate(self._items) if c.id == conv_id), -1)

    def conversation_ids(self) -> list[int]:
        return [c.id for c in self._items]

    # Qt overrides
    def rowCount(self, parent=None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self._items)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        conv = self._items[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return conv.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return conv.snippet or conv.title
        return {self.IdRole: conv.id, self.SnippetRole: conv.snippet,
                self.ConversationRole: conv, self.OpenRole: conv.id in self._open}.get(role)

    def flags(self, index):
        return super().flags(index) | Qt.ItemFlag.ItemIsEditable

    def setData(self, index, value, role=Qt.ItemDataRole.EditRole) -> bool:
        title = str(value).strip()
        if role != Qt.ItemDataRole.EditRole or not index.isValid() or not title:
            return False
        conv = self._items[index.row()]
        conv.title = title
        self.dataChanged.emit(index, index)
        self.renamed.emit(conv.id, title)
        return True
