"""One prompt sent to every open pane at once, and one button that stops them all."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

from app.chat.composer import Composer


class BroadcastBox(QFrame):
    """Signals:
        broadcast_requested(str): the prompt for every open pane
        stop_all_requested(): stop every reply in flight
    """
    broadcast_requested = Signal(str)
    stop_all_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("broadcastBox")
        self.label = QLabel("Broadcast", objectName="broadcastLabel")
        self.composer = Composer("Send one prompt to every open pane…")
        self.button = QPushButton("Send to all", objectName="broadcastButton")
        self.stop_button = QPushButton("Stop all", objectName="stopAllButton",
                                       toolTip="Stop every reply in flight (Ctrl+Shift+.)")
        self.stop_button.setEnabled(False)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(self.label, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(self.composer, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignBottom)
        self.composer.submitted.connect(self.broadcast_requested)
        self.button.clicked.connect(self.composer.submit)
        self.stop_button.clicked.connect(self.stop_all_requested)

    def set_busy(self, busy: bool) -> None:
        """Whether any reply is in flight (Stop all has something to stop)."""
        self.stop_button.setEnabled(busy)
