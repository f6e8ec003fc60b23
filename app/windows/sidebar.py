"""The conversation list: new, search (titles and text), open, rename, pin, delete."""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QVBoxLayout,
)

from app.chat.conversation_delegate import ConversationDelegate
from app.controllers.conversation_list_model import ConversationListModel


class Sidebar(QFrame):
    """Signals:
        new_requested()
        open_requested(int, bool): conversation id, in a new pane
        delete_requested(int): conversation id
        pin_requested(int, bool): conversation id, pinned (True) or not
    """
    new_requested = Signal()
    open_requested = Signal(int, bool)
    delete_requested = Signal(int)
    pin_requested = Signal(int, bool)

    def __init__(self, model: ConversationListModel, parent=None):
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.model = model
        self.new_button = QPushButton("+  New chat", objectName="newChatButton")
        self.search = QLineEdit(objectName="searchField", placeholderText="Search chats")
        self.search.setClearButtonEnabled(True)
        self.list = QListView(objectName="conversationList")
        self.list.setModel(model)
        self.list.setItemDelegate(ConversationDelegate(self.list))
        self.list.setMouseTracking(True)
        # Rows elide their title and snippet to the list's width: never scroll sideways.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self._search_delay = QTimer(self, singleShot=True, interval=150)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 12, 10, 10)
        layout.setSpacing(8)
        for widget in (self.new_button, self.search):
            layout.addWidget(widget)
        layout.addWidget(self.list, 1)
        self.new_button.clicked.connect(self.new_requested)
        self.search.textChanged.connect(lambda _t: self._search_delay.start())
        self._search_delay.timeout.connect(self._on_search_delay_timeout)
        self.active_id: int | None = None
        # A refresh (new message, rename, search) resets the model: highlight again.
        model.modelReset.connect(self._show_active)
        self.list.clicked.connect(self._on_list_clicked)
        self.list.doubleClicked.connect(self._on_list_double_clicked)
        self.list.customContextMenuRequested.connect(self._on_list_custom_context_menu_requested)

    def select(self, conv_id: int | None) -> None:
        """Highlight the active chat (the active pane's), now and after every refresh."""
        self.active_id = conv_id
        self._show_active()

    def _show_active(self) -> None:
        row = -1 if self.active_id is None else self.model.row_of(self.active_id)
        if row >= 0:
            self.list.setCurrentIndex(self.model.index(row))
        else:
            self.list.clearSelection()

    def rename(self, conv_id: int) -> None:
        row = self.model.row_of(conv_id)
        if row >= 0:
            self.list.edit(self.model.index(row))

    def _id(self, index) -> int:
        return index.data(ConversationListModel.IdRole)

    # slots
    def _on_search_delay_timeout(self) -> None:
        self.model.refresh(self.search.text())

    def _on_list_clicked(self, index) -> None:
        self.open_requested.emit(self._id(index), False)

    def _on_list_double_clicked(self, index) -> None:
        self.open_requested.emit(self._id(index), True)

    def _on_list_custom_context_menu_requested(self, pos) -> None:
        index = self.list.indexAt(pos)
        if not index.isValid():
            return
        conv_id = self._id(index)
        menu = QMenu(self)
        menu.addAction("Open in new pane", lambda: self.open_requested.emit(conv_id, True))
        menu.addAction("Rename", lambda: self.list.edit(index))
        pinned = index.data(ConversationListModel.ConversationRole).pinned
        menu.addAction("Unpin" if pinned else "Pin to top",
                       lambda: self.pin_requested.emit(conv_id, not pinned))
        menu.addSeparator()
        menu.addAction("Delete", lambda: self.delete_requested.emit(conv_id))
        menu.popup(self.list.viewport().mapToGlobal(pos))
