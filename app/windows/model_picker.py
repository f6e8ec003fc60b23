"""Choose a model: recent ones, those found in the Hugging Face cache and LM
Studio's folders, or any folder / .gguf file."""
from __future__ import annotations

from pathlib import Path

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

from app.controllers.model_discovery import (
    FoundModel,
    builtin_model,
    find_models,
    models_folders,
)
from app.dialog_folders import MODEL


class ModelPicker(QDialog):
    def __init__(self, recent: list[str], parent=None, found: list[FoundModel] | None = None,
                 builtin: FoundModel | None | bool = True, folders=None):
        """folders: a DialogFolders (app/dialog_folders.py) keeping the open dialogs'
        own last folder (their default: the first models folder on this machine)."""
        super().__init__(parent)
        self._folders = folders
        self.setWindowTitle("Open model")
        self.resize(620, 440)
        self.chosen: str | None = None
        self.list = QListWidget(objectName="modelList")
        builtin = builtin_model() if builtin is True else builtin
        models = [builtin] if builtin else []          # the built-in model first
        models += [FoundModel(p.rstrip("/").split("/")[-1], p, "Recent") for p in recent]
        models += find_models() if found is None else found
        self._fill(_unique_paths(models))
        folder = QPushButton("Open folder…")
        gguf = QPushButton("Open .gguf file…")
        folder.clicked.connect(self._on_folder_clicked)
        gguf.clicked.connect(self._on_gguf_clicked)
        self.list.itemDoubleClicked.connect(self._on_list_item_double_clicked)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open
                                   | QDialogButtonBox.StandardButton.Cancel)
        self.open_button = buttons.button(QDialogButtonBox.StandardButton.Open)
        self.list.currentItemChanged.connect(self._on_list_current_item_changed)
        self._on_list_current_item_changed(None)
        self._select_first()
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
        if not models:        # a note, never a row one could select and "open"
            note = QListWidgetItem("No models found in the Hugging Face cache or LM Studio: "
                                   "open a folder or a .gguf file.")
            note.setFlags(Qt.ItemFlag.NoItemFlags)
            self.list.addItem(note)
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

    def _select_first(self) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole):
                self.list.setCurrentRow(i)
                return

    def _choose(self, path: str | None, remember: bool = False) -> None:
        if path:
            if remember and self._folders is not None:
                # A model folder's own parent: the next dialog shows its neighbours.
                self._folders.remember(MODEL, Path(path).parent)
            self.chosen = path
            self.accept()

    def _on_buttons_accepted(self) -> None:
        item = self.list.currentItem()
        self._choose(item.data(Qt.ItemDataRole.UserRole) if item else None)

    def _on_list_item_double_clicked(self, item) -> None:
        self._choose(item.data(Qt.ItemDataRole.UserRole))

    def _on_list_current_item_changed(self, item, _previous=None) -> None:
        self.open_button.setEnabled(bool(item and item.data(Qt.ItemDataRole.UserRole)))

    def _on_folder_clicked(self) -> None:
        self._choose(QFileDialog.getExistingDirectory(self, "Model folder", self._start()),
                     remember=True)

    def _on_gguf_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model", self._start(),
                                              "GGUF (*.gguf)")
        self._choose(path, remember=True)

    def _start(self) -> str:
        if self._folders is None:
            return start_folder()
        return self._folders.start(MODEL, start_folder() or str(Path.home()))


def start_folder() -> str:
    """Where the open dialogs start: the first models folder on this machine."""
    folders = models_folders()
    return str(folders[0]) if folders else ""


def _unique_paths(models: list[FoundModel]) -> list[FoundModel]:
    seen: set[str] = set()
    out = []
    for m in models:
        if m.path not in seen:
            seen.add(m.path)
            out.append(m)
    return out
