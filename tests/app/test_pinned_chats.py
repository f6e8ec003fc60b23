"""Issue 22 item 15: pinned chats stay at the top of the sidebar, across restarts
(a column in SQLite; older databases get it)."""
from __future__ import annotations

import sqlite3

from PySide6.QtWidgets import QMenu

from app.storage.store import Store


def test_a_pinned_chat_stays_on_top_and_is_saved(make_window, qtbot, monkeypatch):
    window = make_window(load=False)
    first = window.panes.panes()[0].session
    first.send("the first chat")                # no model: its message is kept anyway
    second = window.new_conversation(True).session
    second.send("the second chat")
    window.conversations.refresh()
    ids = window.conversations.conversation_ids()
    assert ids[0] == second.conversation.id      # newest first
    menus = []
    monkeypatch.setattr(QMenu, "popup", lambda menu, *_: menus.append(menu))
    row = window.conversations.row_of(first.conversation.id)
    rect = window.sidebar.list.visualRect(window.conversations.index(row))
    window.sidebar._on_list_custom_context_menu_requested(rect.center())
    pin = next(a for a in menus[-1].actions() if a.text() == "Pin to top")
    pin.trigger()
    assert window.conversations.conversation_ids()[0] == first.conversation.id
    second.send("a newer message")               # still below the pinned one
    window.conversations.refresh()
    assert window.conversations.conversation_ids()[0] == first.conversation.id
    window.sidebar.list.viewport().grab()        # the delegate paints the pin
    window.close()
    again = make_window(load=False)
    assert again.conversations.conversation_ids()[0] == first.conversation.id
    assert again.store.conversation(first.conversation.id).pinned
    again.sessions.set_pinned(first.conversation.id, False)
    assert not again.store.conversation(first.conversation.id).pinned
    assert again.conversations.conversation_ids()[0] == second.conversation.id


def test_a_database_from_before_pins_gets_the_column(tmp_path):
    db = sqlite3.connect(tmp_path / "tandem.sqlite3")
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
            settings TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL,
            updated_at REAL NOT NULL);
        INSERT INTO conversations VALUES (3, 'Old', '{}', 1.0, 2.0);""")
    db.close()
    store = Store(tmp_path)
    (conv,) = store.conversations()
    assert (conv.id, conv.title, conv.pinned) == (3, "Old", False)
    store.update_conversation(conv.copy(pinned=True))
    assert store.conversation(3).pinned
