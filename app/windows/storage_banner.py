"""The banner over the panes while storage is in trouble: a read-only data folder
(for the whole session) or a disk that refuses writes (until they are saved)."""
from __future__ import annotations

from PySide6.QtWidgets import QLabel


class StorageBanner(QLabel):
    def __init__(self, parent=None):
        super().__init__(parent, objectName="storageBanner", wordWrap=True)
        self.setStyleSheet("background: #7a4b00; color: white; padding: 6px;")
        self.read_only = ""        # the start's banner (a read-only folder), kept
        self.hide()

    def show_read_only(self, banner: str) -> None:
        """At start (app/storage/store_opening.py): "" when the folder is writable."""
        self.read_only = banner
        self._show(banner)

    def show_failure(self, db_path, reason: str) -> None:
        self._show(f"Tandem cannot save to {db_path} ({reason}). Your messages and replies "
                   "are kept in memory and saved as soon as there is room again; free some "
                   "disk space, and do not quit until this goes away.")

    def show_recovered(self) -> None:
        self._show(self.read_only)

    def _show(self, text: str) -> None:
        self.setText(text)
        self.setVisible(bool(text))
