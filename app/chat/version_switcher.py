""""‹ 2/3 ›" under an answer that was regenerated or a message that was edited:
steps through its versions."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


class VersionSwitcher(QWidget):
    """Signals:
        selected(int): the 0-based version the user stepped to
    """
    selected = Signal(int)

    def __init__(self, noun: str = "answer", parent=None):
        """noun: what a version is ("answer", or "message" for an edited one)."""
        super().__init__(parent)
        self.setObjectName("versionSwitcher")
        self.previous = QToolButton(text="‹", objectName="versionButton",
                                    toolTip=f"Previous {noun}")
        self.next = QToolButton(text="›", objectName="versionButton", toolTip=f"Next {noun}")
        self.label = QLabel(objectName="versionLabel")
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 6, 0)
        layout.setSpacing(0)
        for widget in (self.previous, self.label, self.next):
            layout.addWidget(widget)
        self.previous.clicked.connect(lambda: self.selected.emit(self._index - 1))
        self.next.clicked.connect(lambda: self.selected.emit(self._index + 1))
        self._index, self._count = 0, 1
        self.hide()

    def set_versions(self, index: int, count: int, enabled: bool) -> None:
        """Shown only when there is more than one; `enabled` False while one streams."""
        self._index, self._count = index, count
        self.label.setText(f"{index + 1}/{count}")
        self.previous.setEnabled(enabled and index > 0)
        self.next.setEnabled(enabled and index < count - 1)
        self.setVisible(count > 1)
