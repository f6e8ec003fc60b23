"""Export a chat as Markdown and as JSON from the File menu and the pane's menu
(real engine, tiny model); the save dialog is answered by the test."""
from __future__ import annotations

import json

import pytest
from PySide6.QtWidgets import QFileDialog

from app.controllers.conversation_export import suggested_name, to_markdown
from app.storage.conversation import Conversation
from app.storage.message import Message


@pytest.fixture
def save_to(monkeypatch):
    """save_to(path): the next save dialogs answer `path`; .asked lists their start paths."""
    asked = []

    def answer(path):
        def fake(parent, caption, start, file_filter):
            asked.append(start)
            return str(path), file_filter
        monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(fake))
    answer.asked = asked
    return answer


def _menu_action(window, text):
    for top in window.menuBar().actions():
        for action in top.menu().actions():
            if action.text() == text:
                return action
    raise AssertionError(f"no menu action {text!r}")


def _chat(window, wait_until):
    pane = window.panes.panes()[0]
    pane.session.send("Name a river\nin France")
    wait_until(lambda: not pane.session.busy)
    pane.view.message_widgets()[1].buttons["regenerate"].click()
    wait_until(lambda: not pane.session.busy)
    return pane


def test_file_menu_exports_markdown(make_window, wait_until, save_to, tmp_path):
    window = make_window(max_tokens=6)
    pane = _chat(window, wait_until)
    save_to(tmp_path / "river")                  # no extension typed: .md is added
    _menu_action(window, "Export chat as Markdown…").trigger()
    text = (tmp_path / "river.md").read_text(encoding="utf-8")
    answer = pane.session.model.message(1)
    assert text.startswith("# Name a river in France\n")
    assert "## You\n\nName a river\nin France\n" in text
    assert f"## Assistant ({answer.model}), answer 2 of 2\n" in text
    assert answer.content.strip() in text
    assert save_to.asked[0].endswith("Name a river in France.md")
    assert str(tmp_path / "river.md") in window.statusBar().currentMessage()


def test_pane_menu_exports_json_with_every_version(make_window, wait_until, save_to,
                                                   tmp_path):
    window = make_window(max_tokens=6)
    pane = _chat(window, wait_until)
    save_to(tmp_path / "river.json")
    actions = {a.text(): a for a in pane.menu_button.menu().actions()}
    actions["Export as JSON…"].trigger()
    data = json.loads((tmp_path / "river.json").read_text(encoding="utf-8"))
    stored = window.store.messages(pane.session.conversation.id)
    assert data["format"] == "tandem-conversation" and data["title"] == pane.session.title
    assert data["settings"] == pane.session.conversation.settings
    assert [(m["role"], m["content"]) for m in data["messages"]] == \
           [(m.role, m.content) for m in stored]
    answer = data["messages"][1]
    assert answer["selected_version"] == 1 and len(answer["versions"]) == 2
    assert answer["versions"][1]["content"] == answer["content"]
    assert answer["num_tokens"] == stored[1].num_tokens
    save_to(tmp_path / "again.json")
    actions["Export as JSON…"].trigger()          # starts where the last export went
    assert save_to.asked[-1].startswith(str(tmp_path))


def test_cancel_writes_nothing_and_an_unwritable_path_says_so(make_window, monkeypatch,
                                                              save_to, tmp_path):
    window = make_window(load=False)
    pane = window.panes.panes()[0]
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        staticmethod(lambda *a: ("", "")))
    assert window.export_chat(pane, "json") is None
    warnings = []
    monkeypatch.setattr("app.windows.export_dialog.QMessageBox.warning",
                        lambda *a: warnings.append(a[2]))
    save_to(tmp_path / "missing-folder" / "x.md")
    assert window.export_chat(pane, "markdown") is None
    assert "Could not write" in warnings[0]


def test_markdown_shows_reasoning_folded_and_system_prompt_quoted():
    conv = Conversation(title="Q?").with_settings(system_prompt="Be brief.\nBe kind.")
    text = to_markdown(conv, [Message("user", "2+2?"),
                              Message("assistant", "<think>add</think>4", model="m")])
    assert "> Be brief.\n> Be kind." in text
    assert "<details><summary>Reasoning</summary>\n\nadd\n\n</details>\n\n4" in text
    assert suggested_name(Conversation(title="a/b: c?"), "md") == "a b c.md"
