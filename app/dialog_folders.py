"""Where each file dialog starts: its own last folder (one setting per dialog), else
its default (Documents for what the user saves, the models folder for the model
picker), always a folder that exists. Qt's own file dialog, given a folder that does
not exist (a fresh account has no ~/Documents), opens the last folder *any* dialog
visited: the export dialog opened in the models folder that way."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStandardPaths

EXPORT, TRACE, MODEL = "export_folder", "trace_folder", "model_folder"


def documents_folder() -> str:
    return QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)


class DialogFolders:
    """The folders of the window's file dialogs, kept in the store's settings."""

    def __init__(self, store):
        self._store = store

    def start(self, key: str, default: str | None = None) -> str:
        """`key`'s dialog's last folder, else `default` (Documents), else the nearest
        folder above them that exists (home at worst)."""
        for candidate in (self._store.get_setting(key), default or documents_folder()):
            if candidate:
                found = _existing(Path(candidate).expanduser())
                if found is not None:
                    return str(found)
        return str(Path.home())

    def start_file(self, key: str, name: str, default: str | None = None) -> str:
        """A save dialog's starting file: `name` in its folder."""
        return str(Path(self.start(key, default)) / name)

    def remember(self, key: str, chosen: str | Path) -> None:
        """The folder of what the user chose (a file's folder, or the folder itself)."""
        path = Path(chosen)
        self._store.set_setting(key, str(path if path.is_dir() else path.parent))


def _existing(path: Path) -> Path | None:
    """`path` or its nearest existing parent below the filesystem's root; None if none."""
    for folder in (path, *path.parents):
        if folder.is_dir():
            return folder if folder.parent != folder else None
    return None
