"""A QTextBrowser that is exactly as tall as its document (no vertical scroll bar),
so messages stack in a scroll area and reflow with the pane's width; code keeps its
lines (set_no_wrap) and scrolls sideways instead."""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser

from app.style import theme_colors

DOC_CSS = """
code {{ font-family: 'JetBrains Mono', 'Menlo', 'DejaVu Sans Mono', monospace;
       background-color: {inline-code-bg}; }}
a {{ color: {link}; }}
table {{ border-collapse: collapse; }}
th {{ background-color: {inline-code-bg}; font-weight: 600; }}
th, td {{ padding: 4px 8px; }}
"""


def doc_css() -> str:
    """Rich-text CSS in the current theme's colours."""
    return DOC_CSS.format_map(theme_colors())


class AutoHeightBrowser(QTextBrowser):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._source = None
        self._markdown = False
        self._wrap = True
        self.setObjectName("messageText")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setOpenExternalLinks(True)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.document().setDocumentMargin(2)
        self._css = doc_css()
        self.document().setDefaultStyleSheet(self._css)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.viewport().setAutoFillBackground(False)

    def set_markdown(self, text: str) -> None:
        if text != self._source:
            self._source, self._markdown = text, True
            self.setMarkdown(text)

    def set_plain(self, text: str) -> None:
        """Streaming text only grows: append the new part, so a selection survives and
        a syntax highlighter re-colours only the lines that changed."""
        if text == self._source:
            return
        grows = not self._markdown and self._source and text.startswith(self._source)
        old, self._source, self._markdown = self._source, text, False
        if grows:
            cursor = QTextCursor(self.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(text[len(old):])
        else:
            self.setPlainText(text)

    def set_no_wrap(self) -> None:
        """Long lines stay whole (code: a line broken mid-token reads wrong) and a
        horizontal scroll bar appears under them when they do not fit."""
        self._wrap = False
        self.setLineWrapMode(QTextBrowser.LineWrapMode.NoWrap)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.horizontalScrollBar().rangeChanged.connect(self._fit)

    def source_text(self) -> str:
        return self._source or ""

    def _fit(self, *_):
        margins = self.contentsMargins()
        height = int(self.document().size().height()) + margins.top() + margins.bottom()
        if not self._wrap and self.horizontalScrollBar().maximum() > 0:
            height += self.horizontalScrollBar().sizeHint().height()
        if height != self.height():
            self.setFixedHeight(height)

    def _restyle(self) -> None:
        """A theme change: Markdown is rendered again with the new CSS."""
        css = doc_css()
        if css == self._css:
            return
        self._css = css
        self.document().setDefaultStyleSheet(css)
        if self._markdown and self._source is not None:
            source, self._source = self._source, None
            self.set_markdown(source)

    # Qt overrides
    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() == QEvent.Type.StyleChange:
            self._restyle()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        if self._wrap:
            self.document().setTextWidth(self.viewport().width())
        self._fit()

    def wheelEvent(self, event):
        if not self._wrap and event.angleDelta().x():
            super().wheelEvent(event)        # sideways through long code lines
            return
        event.ignore()       # let the chat's scroll area scroll
