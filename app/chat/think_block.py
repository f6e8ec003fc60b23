"""The model's reasoning (<think>…</think>) as a collapsible block."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QToolButton, QVBoxLayout

from app.chat.auto_height_browser import AutoHeightBrowser


class ThinkBlock(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("thinkBlock")
        self.toggle = QToolButton(objectName="thinkToggle", checkable=True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.toggled.connect(self._on_toggle_toggled)
        self.body = AutoHeightBrowser()
        self.body.setObjectName("thinkText")
        self.body.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 2, 8, 4)
        layout.setSpacing(2)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.body)

    def set_reasoning(self, text: str, thinking: bool) -> None:
        words = len(text.split())
        self.toggle.setText("Thinking…" if thinking else f"Reasoning · {words} words")
        self.body.set_plain(text)

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def _on_toggle_toggled(self, checked: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if checked else Qt.ArrowType.RightArrow)
        self.body.setVisible(checked)
