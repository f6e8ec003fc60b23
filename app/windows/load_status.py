"""The status bar's model line and load bar, and the window's title, following the
bridge's loads: "Loading …" with an elided one-line bar, then "Model: name"."""
from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QLabel, QProgressBar


class LoadStatus(QObject):
    def __init__(self, window, bridge, parent=None):
        super().__init__(parent or window)
        self._window, self._bridge = window, bridge
        self.label = QLabel("No model", objectName="modelLabel")
        self.progress = QProgressBar(objectName="loadProgress", maximum=1000)
        self.progress.setFixedWidth(220)
        self.progress.hide()
        window.statusBar().addWidget(self.label, 1)
        window.statusBar().addPermanentWidget(self.progress)
        bridge.load_started.connect(self._on_bridge_load_started)
        bridge.load_progress.connect(self._on_bridge_load_progress)
        bridge.model_loaded.connect(self._on_bridge_model_loaded)
        bridge.load_failed.connect(self._on_bridge_load_failed)

    # slots
    def _on_bridge_load_started(self, path: str) -> None:
        self.progress.setValue(0)
        self.progress.show()
        self.label.setText(f"Loading {path or 'default model'}…")

    def _on_bridge_load_progress(self, fraction: float, message: str) -> None:
        self.progress.setValue(int(fraction * 1000))
        # One line inside the bar: elide what does not fit rather than wrap and clip.
        width = self.progress.width() - 12
        self.progress.setFormat(self.progress.fontMetrics().elidedText(
            message, Qt.TextElideMode.ElideMiddle, width).replace("%", "%%"))
        self.progress.setToolTip(message)

    def _on_bridge_model_loaded(self, name: str) -> None:
        self.progress.hide()
        self.label.setText(f"Model: {name}")
        self._window.setWindowTitle(f"Tandem — {name}")

    def _on_bridge_load_failed(self, _message: str) -> None:
        self.progress.hide()
        current = self._bridge.model_name      # the model kept, or the one loaded again
        self.label.setText(f"Model: {current}" if current else "No model")
