"""The box a user message is edited in: Ctrl+Enter saves (and resends), Escape
cancels; both are claimed here, before a pane's shortcuts see them."""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import QPlainTextEdit

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

    # Qt overrides
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
