"""Renders Markdown as a column of prose blocks and code blocks. Re-rendering a
growing message reuses the existing blocks, so streaming stays cheap."""
from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.chat.auto_height_browser import AutoHeightBrowser
from app.chat.code_block import CodeBlock
from app.chat.markdown_segments import split_markdown


class MarkdownView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._blocks: list[tuple[str, QWidget]] = []
        self._text = None

    def set_markdown(self, text: str) -> None:
        if text == self._text and not (self._blocks and self._blocks[0][0] == "plain"):
            return
        self._text = text
        segments = split_markdown(text)
        for i, seg in enumerate(segments):
            if i >= len(self._blocks) or self._blocks[i][0] != seg.kind:
                self._drop_from(i)
                self._blocks.append((seg.kind, self._make(seg.kind)))
                self._layout.addWidget(self._blocks[i][1])
            widget = self._blocks[i][1]
            if seg.kind == "code":
                widget.set_code(seg.text, seg.language)
            else:
                widget.set_markdown(seg.text)
        self._drop_from(len(segments))

    def set_plain(self, text: str) -> None:
        """Text as typed (a user's message): wrapped, line breaks kept, no Markdown."""
        if text == self._text and self._blocks and self._blocks[0][0] == "plain":
            return
        self._text = text
        if not self._blocks or self._blocks[0][0] != "plain":
            self._drop_from(0)
            self._blocks.append(("plain", AutoHeightBrowser()))
            self._layout.addWidget(self._blocks[0][1])
        self._drop_from(1)
        self._blocks[0][1].set_plain(text)

    def code_blocks(self) -> list[CodeBlock]:
        return [w for kind, w in self._blocks if kind == "code"]

    def _make(self, kind: str) -> QWidget:
        return CodeBlock() if kind == "code" else AutoHeightBrowser()

    def _drop_from(self, i: int) -> None:
        for _kind, widget in self._blocks[i:]:
            widget.setParent(None)
            widget.deleteLater()
        del self._blocks[i:]
