"""Choose a model: recent ones, those found in the Hugging Face cache and LM
Studio's folders, or any folder / .gguf file."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
)

from app.controllers.model_discovery import FoundModel, find_models


class ModelPicker(QDialog):
    def __init__(self, recent: list[str], parent=None, found: list[FoundModel] | None = None):
        super().__init__(parent)
        self.setWindowTitle("Open model")
        self.resize(620, 440)
        self.chosen: str | None = None
        self.list = QListWidget(objectName="modelList")
        models = [FoundModel(p.rstrip("/").split("/")[-1], p, "Recent") for p in recent]
        models += find_models() if found is None else found
        self._fill(models)
        folder = QPushButton("Open folder…")
        gguf = QPushButton("Open .gguf file…")
        folder.clicked.connect(self._on_folder_clicked)
        gguf.clicked.connect(self._on_gguf_clicked)
        self.list.itemDoubleClicked.connect(self._on_list_item_double_clicked)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._on_buttons_accepted)
        buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(folder)
        row.addWidget(gguf)
        row.addStretch(1)
        row.addWidget(buttons)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Recent models and models found on this machine"))
        layout.addWidget(self.list, 1)
        layout.addLayout(row)

    def _fill(self, models: list[FoundModel]) -> None:
        if not models:
            self.list.addItem("No models found in the Hugging Face cache or LM Studio.")
        source = None
        for m in models:
            if m.source != source:
                source = m.source
                header = QListWidgetItem(source)
                header.setFlags(Qt.ItemFlag.NoItemFlags)
                self.list.addItem(header)
            item = QListWidgetItem(f"   {m.name}")
            item.setToolTip(m.path)
            item.setData(Qt.ItemDataRole.UserRole, m.path)
            self.list.addItem(item)

    def _choose(self, path: str | None) -> None:
        if path:
            self.chosen = path
            self.accept()

    def _on_buttons_accepted(self) -> None:
        item = self.list.currentItem()
        self._choose(item.data(Qt.ItemDataRole.UserRole) if item else None)

    def _on_list_item_double_clicked(self, item) -> None:
        self._choose(item.data(Qt.ItemDataRole.UserRole))

    def _on_folder_clicked(self) -> None:
        self._choose(QFileDialog.getExistingDirectory(self, "Model folder"))

    def _on_gguf_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model", "", "GGUF (*.gguf)")
        self._choose(path)
