"""A scrolling column of MessageWidgets bound to a ChatModel; follows the
bottom while the user is at the bottom."""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QScrollArea, QVBoxLayout, QWidget

from app.chat.message_widget import MessageWidget
from app.controllers.chat_model import ChatModel

READING_WIDTH = 820        # px: the widest the message column gets


class ChatView(QScrollArea):
    """Signals:
        stop_requested(int): row
        regenerate_requested(int): row
        edit_submitted(int, str): row, new text
        version_requested(int, int): row, the answer's version to show
        continue_requested(int): row of a reply cut short, to carry on
    """
    stop_requested = Signal(int)
    regenerate_requested = Signal(int)
    edit_submitted = Signal(int, str)
    version_requested = Signal(int, int)
    continue_requested = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        content = QWidget(objectName="chatContent")
        # A wide pane keeps a readable column (lines of ~100 characters), centred.
        self.column_widget = QWidget(objectName="chatColumn")
        self.column_widget.setMaximumWidth(READING_WIDTH)
        centre = QHBoxLayout(content)
        centre.setContentsMargins(0, 0, 0, 0)
        centre.addWidget(self.column_widget)
        self._column = QVBoxLayout(self.column_widget)
        self._column.setContentsMargins(0, 8, 0, 8)
        self._column.setSpacing(2)
        self._column.addStretch(1)
        self.setWidget(content)
        self._model: ChatModel | None = None
        self._widgets: list[MessageWidget] = []
        self._follow = True
        self.verticalScrollBar().rangeChanged.connect(self._on_scrollbar_range_changed)
        self.verticalScrollBar().valueChanged.connect(self._on_scrollbar_value_changed)

    def set_model(self, model: ChatModel) -> None:
        """Bind once; a pane showing another conversation makes a new view."""
        assert self._model is None, "ChatView is bound to one model"
        self._model = model
        model.rowsInserted.connect(self._on_model_rows_inserted)
        model.rowsRemoved.connect(self._on_model_rows_removed)
        model.dataChanged.connect(self._on_model_data_changed)
        model.modelReset.connect(self._rebuild)
        self._rebuild()

    def message_widgets(self) -> list[MessageWidget]:
        return list(self._widgets)

    def _rebuild(self) -> None:
        self._remove(0, len(self._widgets) - 1)
        self._insert(0, self._model.rowCount() - 1)
        QTimer.singleShot(0, self.scroll_to_bottom)

    def _insert(self, first: int, last: int) -> None:
        for row in range(first, last + 1):
            widget = MessageWidget(self._model.message(row))
            widget.stop_requested.connect(lambda w=widget: self._emit_for(w, self.stop_requested))
            widget.regenerate_requested.connect(
                lambda w=widget: self._emit_for(w, self.regenerate_requested))
            widget.continue_requested.connect(
                lambda w=widget: self._emit_for(w, self.continue_requested))
            widget.edit_submitted.connect(
                lambda text, w=widget: self.edit_submitted.emit(self._widgets.index(w), text))
            widget.version_requested.connect(
                lambda index, w=widget: self.version_requested.emit(self._widgets.index(w),
                                                                    index))
            self._widgets.insert(row, widget)
            self._column.insertWidget(row, widget)
        self._follow = True
        self._mark_last()

    def _remove(self, first: int, last: int) -> None:
        for widget in self._widgets[first:last + 1]:
            widget.setParent(None)
            widget.deleteLater()
        del self._widgets[first:last + 1]
        self._mark_last()

    def _mark_last(self) -> None:
        for i, widget in enumerate(self._widgets):
            widget.set_last(i == len(self._widgets) - 1)

    def _emit_for(self, widget: MessageWidget, signal) -> None:
        if widget in self._widgets:
            signal.emit(self._widgets.index(widget))

    def set_waiting_text(self, text: str) -> None:
        """What the last reply shows until its first token (e.g. the model loading)."""
        if self._widgets:
            self._widgets[-1].set_waiting_text(text)

    def scroll_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    # slots
    def _on_model_rows_inserted(self, _parent, first: int, last: int) -> None:
        self._insert(first, last)

    def _on_model_rows_removed(self, _parent, first: int, last: int) -> None:
        self._remove(first, last)

    def _on_model_data_changed(self, top_left, bottom_right, _roles=()) -> None:
        for row in range(top_left.row(), bottom_right.row() + 1):
            if row < len(self._widgets):
                self._widgets[row].set_message(self._model.message(row))

    def _on_scrollbar_range_changed(self, _low: int, high: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(high)

    def _on_scrollbar_value_changed(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - 24
