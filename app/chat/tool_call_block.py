"""A tool call the model wrote, as its own block: the function's name and its
arguments as indented JSON (app/chat/tool_call_text.py reads them)."""
from __future__ import annotations

from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from app.chat.code_block import CodeBlock
from app.chat.tool_call_text import pretty_arguments
from engine.tokenization.tool_calls import ToolCall


class ToolCallBlock(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("toolCallBlock")
        self.call: ToolCall | None = None
        self.title = QLabel(objectName="toolCallName")
        self.arguments = CodeBlock()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 6)
        layout.setSpacing(4)
        layout.addWidget(self.title)
        layout.addWidget(self.arguments)

    def set_call(self, call: ToolCall | None) -> None:
        """None: a call still being written (its name is not known yet)."""
        self.call = call
        if call is None:
            self.title.setText("Tool call…")
            self.arguments.hide()
            return
        self.title.setText(f"Tool call · {call.name}")
        self.arguments.show()
        self.arguments.set_code(pretty_arguments(call), "json")


class ToolCallList(QWidget):
    """A reply's tool calls, one block each, under its text; a re-render while the
    reply streams reuses the blocks it has."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self.blocks: list[ToolCallBlock] = []

    def set_calls(self, calls: tuple[ToolCall, ...], pending: bool) -> None:
        shown = [*calls, None] if pending else list(calls)
        while len(self.blocks) < len(shown):
            self.blocks.append(ToolCallBlock())
            self._layout.addWidget(self.blocks[-1])
        for block in self.blocks[len(shown):]:
            block.setParent(None)
            block.deleteLater()
        del self.blocks[len(shown):]
        for block, call in zip(self.blocks, shown):
            if call is None or block.call is None or block.call.name != call.name \
                    or block.call.arguments != call.arguments:
                block.set_call(call)
        self.setVisible(bool(shown))
