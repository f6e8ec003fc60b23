"""The box a user message is edited in: Ctrl+Enter saves (and resends), Escape
cancels; both are claimed here, before a pane's shortcuts see them."""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QPlainTextEdit

MAX_LINES = 12         # taller edits scroll
_SAVE_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


def _is_save(event) -> bool:
    return (event.key() in _SAVE_KEYS
            and bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier))


class EditBox(QPlainTextEdit):
    """Signals:
        save_requested(): Ctrl+Enter
        cancel_requested(): Escape
    """
    save_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("editEditor")
        self.setToolTip("Ctrl+Enter sends the edited message, Escape cancels")
        self.document().contentsChanged.connect(self._fit)

    def _fit(self) -> None:
        """As tall as the text (wrapped lines counted), up to MAX_LINES."""
        lines = int(self.document().documentLayout().documentSize().height())
        # One empty line below the text: room to go on typing without a scroll.
        lines = min(max(lines, self.document().blockCount()) + 1, MAX_LINES)
        line = QFontMetrics(self.document().defaultFont()).lineSpacing()
        margins = self.contentsMargins()
        self.setFixedHeight(lines * line + margins.top() + margins.bottom()
                            + 2 * int(self.document().documentMargin()) + 4)

    # Qt overrides
    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._fit()

    def event(self, event):
        # Escape would otherwise reach the pane's "stop generating" shortcut.
        if event.type() == QEvent.Type.ShortcutOverride and (
                event.key() == Qt.Key.Key_Escape or _is_save(event)):
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event):
        if _is_save(event):
            self.save_requested.emit()
        elif event.key() == Qt.Key.Key_Escape:
            self.cancel_requested.emit()
        else:
            super().keyPressEvent(event)
