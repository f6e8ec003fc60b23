"""The message box: Enter sends, Shift+Enter starts a new line; grows to a few
lines as you type."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QPlainTextEdit

MAX_LINES = 6


class Composer(QPlainTextEdit):
    """Signals:
        submitted(str): the text, when Enter is pressed on non-empty text
    """
    submitted = Signal(str)

    def __init__(self, placeholder: str = "Message…", parent=None):
        super().__init__(parent)
        self.setObjectName("composer")
        self.setPlaceholderText(placeholder)
        self.setTabChangesFocus(True)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.document().contentsChanged.connect(self._on_document_contents_changed)
        self._on_document_contents_changed()

    def submit(self) -> None:
        text = self.toPlainText()
        if text.strip():
            self.clear()
            self.submitted.emit(text)

    def _on_document_contents_changed(self) -> None:
        line = self.fontMetrics().lineSpacing()
        # Lines as shown: typed line breaks and long lines wrapped at the box's width
        # (a plain-text document's layout measures its height in lines).
        shown = int(self.document().documentLayout().documentSize().height())
        num_lines = max(shown, self.document().blockCount(), 1)
        lines = min(num_lines, MAX_LINES)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded if num_lines > MAX_LINES
                                        else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        margins = self.contentsMargins()
        self.setFixedHeight(lines * line + 2 * int(self.document().documentMargin())
                            + margins.top() + margins.bottom() + 6)

    # Qt overrides
    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._on_document_contents_changed()      # wrapping changed with the width

    def keyPressEvent(self, event):
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submit()
            return
        super().keyPressEvent(event)
