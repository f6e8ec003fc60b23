"""Help > About Tandem: the version, the loaded model, the engine's kernels, and
the folders where Tandem keeps its data, each with an Open button."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
)

from app.about_info import AboutInfo


def _value(text: str, tooltip: str = "") -> QLabel:
    label = QLabel(text, objectName="aboutValue", toolTip=tooltip, wordWrap=True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class AboutDialog(QDialog):
    def __init__(self, info: AboutInfo, parent=None):
        super().__init__(parent)
        self.setWindowTitle("About Tandem")
        self.setMinimumWidth(560)
        self.info = info
        self.open_buttons: dict[str, QPushButton] = {}
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Tandem", objectName="aboutTitle"))
        layout.addWidget(QLabel(f"Version {info.version} · a desktop chat app with its own "
                                "batched MLX inference engine", objectName="aboutVersion",
                                wordWrap=True))
        layout.addSpacing(8)
        layout.addLayout(self._grid())
        # Why an Open did nothing (no file manager on this system), and the way round.
        self.notice = QLabel(objectName="aboutNotice", wordWrap=True)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notice.hide()
        layout.addWidget(self.notice)
        layout.addStretch(1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy details", QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(info.as_text()))
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _grid(self) -> QGridLayout:
        info, grid = self.info, QGridLayout()
        grid.setHorizontalSpacing(12)
        rows = [("Model", _value(info.model + (f"\n{info.model_path}" if info.model_path
                                                else ""))),
                ("Engine", _value(info.kernels)),
                ("Runtime", _value(info.runtime))]
        if info.kernel_details:
            rows.insert(2, ("", _value(info.kernel_details)))
        for row, (key, value) in enumerate(rows):
            grid.addWidget(QLabel(key, objectName="aboutKey"), row, 0, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(value, row, 1, 1, 2)
        for name, path in (("Data folder", info.data_dir), ("Models folder", info.models_dir),
                           ("Traces folder", info.traces_dir)):
            row = grid.rowCount()
            grid.addWidget(QLabel(name, objectName="aboutKey"), row, 0)
            grid.addWidget(_value(str(path)), row, 1)
            button = QPushButton("Open", toolTip=f"Show {path} in the file manager")
            button.clicked.connect(lambda _=False, p=path: self._open(p))
            self.open_buttons[name] = button
            grid.addWidget(button, row, 2)
        grid.setColumnStretch(1, 1)
        return grid

    def _open(self, path: Path) -> bool:
        if open_folder(path):
            self.notice.hide()
            return True
        QGuiApplication.clipboard().setText(str(path))
        self.notice.setText(f"No file manager could be started to show {path} (nothing is "
                            "set to open folders on this system). The path is copied: "
                            "paste it in a terminal or a file manager.")
        self.notice.show()
        return False

    # Qt overrides
    def showEvent(self, event):
        super().showEvent(event)
        # Wrapped labels ask for height as if narrow: fit the height to the real width.
        height = self.layout().totalHeightForWidth(self.width())
        if height > 0:
            self.resize(self.width(), height)


def open_folder(path: Path) -> bool:
    """Create it if need be (traces before the first recording), then show it."""
    Path(path).mkdir(parents=True, exist_ok=True)
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
