"""A QTextBrowser that is exactly as tall as its document (no scroll bars), so
messages stack in a scroll area and reflow with the pane's width."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser

DOC_CSS = """
code { font-family: 'JetBrains Mono', 'Menlo', 'DejaVu Sans Mono', monospace;
       background-color: #eef0f4; }
table { border-collapse: collapse; }
th { background-color: #eef0f4; font-weight: 600; }
th, td { padding: 4px 8px; }
"""


class AutoHeightBrowser(QTextBrowser):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._source = None
        self.setObjectName("messageText")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setOpenExternalLinks(True)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.document().setDocumentMargin(2)
        self.document().setDefaultStyleSheet(DOC_CSS)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.viewport().setAutoFillBackground(False)

    def set_markdown(self, text: str) -> None:
        if text != self._source:
            self._source = text
            self.setMarkdown(text)

    def set_plain(self, text: str) -> None:
        if text != self._source:
            self._source = text
            self.setPlainText(text)

    def source_text(self) -> str:
        return self._source or ""

    def _fit(self, *_):
        margins = self.contentsMargins()
        height = int(self.document().size().height()) + margins.top() + margins.bottom()
        if height != self.height():
            self.setFixedHeight(height)

    # Qt overrides
    def resizeEvent(self, event):
        super().resizeEvent(event)
        self.document().setTextWidth(self.viewport().width())
        self._fit()

    def wheelEvent(self, event):
        event.ignore()       # let the chat's scroll area scroll
