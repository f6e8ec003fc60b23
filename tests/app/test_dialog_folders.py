"""Issue 22 item 10: each file dialog starts in its own last folder; export and
"Save trace as" default to Documents (its nearest existing parent when a fresh
account has none), never in the folder the model picker used."""
from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

from app import dialog_folders
from app.dialog_folders import MODEL, DialogFolders
from app.windows.model_picker import ModelPicker


@pytest.fixture
def documents(tmp_path, monkeypatch):
    (tmp_path / "home").mkdir()
    folder = tmp_path / "home" / "Documents"
    monkeypatch.setattr(dialog_folders, "documents_folder", lambda: str(folder))
    return folder


@pytest.fixture
def dialogs(monkeypatch):
    """The start folder each dialog was given; answers: what the next ones return."""
    asked, answers = [], []

    def save(parent, caption, start, file_filter=""):
        asked.append(("save", start))
        return (answers.pop(0) if answers else ""), file_filter

    def open_file(parent, caption, start, file_filter=""):
        asked.append(("open", start))
        return (answers.pop(0) if answers else ""), file_filter
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(save))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(open_file))
    return asked, answers


def test_export_starts_in_documents_not_in_the_models_folder(make_window, documents,
                                                             dialogs, tmp_path):
    asked, answers = dialogs
    window = make_window(load=False)
    pane = window.panes.panes()[0]
    models = tmp_path / "models"
    models.mkdir()
    answers.append(str(models / "m.gguf"))
    picker = ModelPicker([], window, found=[], builtin=False, folders=window.folders)
    picker._on_gguf_clicked()
    assert picker.chosen == str(models / "m.gguf")
    window.export_chat(pane, "markdown")                 # cancelled
    assert Path(asked[-1][1]).parent == documents.parent  # no Documents yet: its parent
    documents.mkdir(parents=True)
    window.export_chat(pane, "json")
    assert Path(asked[-1][1]).parent == documents
    out = tmp_path / "exports"
    out.mkdir()
    answers.append(str(out / "chat.md"))
    assert window.export_chat(pane, "markdown") == out / "chat.md"
    window.export_chat(pane, "markdown")
    assert Path(asked[-1][1]).parent == out               # its own last folder
    picker = ModelPicker([], window, found=[], builtin=False, folders=window.folders)
    picker._on_gguf_clicked()
    assert asked[-1] == ("open", str(models))             # and the picker keeps its own


def test_save_trace_as_remembers_its_own_folder(make_window, documents, dialogs, tmp_path,
                                                wait_until):
    asked, answers = dialogs
    documents.mkdir(parents=True)
    window = make_window(max_tokens=2)
    window.status_panel.trace_button.click()
    session = window.panes.panes()[0].session
    session.send("hi")
    wait_until(lambda: not session.busy)
    window.save_trace_as()                                 # cancelled
    assert Path(asked[-1][1]).parent == documents
    traces = tmp_path / "traces-here"
    traces.mkdir()
    answers.append(str(traces / "t.json"))
    assert window.save_trace_as() == traces / "t.json"
    window.save_trace_as()
    assert Path(asked[-1][1]).parent == traces
    window.export_chat(window.panes.panes()[0], "json")
    assert Path(asked[-1][1]).parent == documents          # export has its own folder


def test_a_deleted_folder_falls_back_to_its_nearest_parent(tmp_path):
    class Store(dict):
        get_setting = dict.get
        set_setting = dict.__setitem__
    folders = DialogFolders(Store())
    folders.remember(MODEL, tmp_path / "a" / "gone.gguf")
    assert folders.start(MODEL) == str(tmp_path)           # "a" was never made
