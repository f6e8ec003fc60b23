"""One prompt sent to every open pane at once."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

from app.chat.composer import Composer


class BroadcastBox(QFrame):
    """Signals:
        broadcast_requested(str): the prompt for every open pane
    """
    broadcast_requested = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("broadcastBox")
        self.label = QLabel("Broadcast", objectName="broadcastLabel")
        self.composer = Composer("Send one prompt to every open pane…")
        self.button = QPushButton("Send to all", objectName="broadcastButton")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(self.label, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(self.composer, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        self.composer.submitted.connect(self.broadcast_requested)
        self.button.clicked.connect(self.composer.submit)
