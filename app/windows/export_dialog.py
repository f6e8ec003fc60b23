"""Export a conversation: ask where (a save dialog that starts in the last export
folder, else Documents: app/dialog_folders.py), write Markdown or JSON, say where
it went."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.controllers.conversation_export import suggested_name, to_json, to_markdown
from app.dialog_folders import EXPORT, DialogFolders

FORMATS = {"markdown": ("md", "Markdown (*.md)", to_markdown),
           "json": ("json", "JSON (*.json)", to_json)}
FOLDER_KEY = EXPORT


def export_conversation(parent, store, session, fmt: str) -> Path | None:
    """The file written, or None if the user cancelled or it could not be written."""
    extension, file_filter, render = FORMATS[fmt]
    session.model.flush()        # a streaming answer: export what has arrived
    folders = DialogFolders(store)
    start = folders.start_file(EXPORT, suggested_name(session.conversation, extension))
    chosen, _ = QFileDialog.getSaveFileName(parent, f"Export chat as {fmt.title()}", start,
                                            file_filter)
    if not chosen:
        return None
    path = Path(chosen)
    if path.suffix.lower() != "." + extension:
        path = path.with_name(path.name + "." + extension)
    try:
        path.write_text(render(session.conversation, session.model.messages()),
                        encoding="utf-8")
    except OSError as exc:
        QMessageBox.warning(parent, "Export failed",
                            f"Could not write {path}:\n{exc.strerror or exc}\n"
                            "Choose another folder or file name.")
        return None
    folders.remember(EXPORT, path)
    return path
