"""Conversations stored before the JSON settings column keep their settings,
their messages and their ids when a new version opens the database."""
from __future__ import annotations

import json
import sqlite3

from app.storage.conversation import Conversation
from app.storage.message import Message
from app.storage.store import Store

_OLD_SCHEMA = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, system_prompt TEXT NOT NULL,
    temperature REAL NOT NULL, top_p REAL NOT NULL, max_tokens INTEGER NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    state TEXT NOT NULL, ttft_s REAL, decode_tok_s REAL, num_tokens INTEGER,
    prompt_tokens INTEGER, model TEXT NOT NULL DEFAULT '', error TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _old_database(folder) -> None:
    db = sqlite3.connect(folder / "tandem.sqlite3")
    db.executescript(_OLD_SCHEMA)
    db.executemany("INSERT INTO conversations VALUES (?,?,?,?,?,?,?,?)",
                   [(3, "Rivers", "You are a poet.", 0.3, 0.8, 256, 10.0, 20.0),
                    (7, "Pasta", "", 1.2, 0.95, 2048, 11.0, 30.0)])
    db.execute("INSERT INTO messages (conversation_id, position, role, content, state, "
               "created_at) VALUES (3, 0, 'user', 'a river poem', 'done', 12.0)")
    db.execute("INSERT INTO settings VALUES ('last_model', ?)", (json.dumps("m.gguf"),))
    db.commit()
    db.close()


def test_old_columns_move_into_the_settings_json(tmp_path):
    _old_database(tmp_path)
    store = Store(tmp_path)
    rivers, pasta = store.conversation(3), store.conversation(7)
    assert rivers.title == "Rivers" and (rivers.created_at, rivers.updated_at) == (10.0, 20.0)
    assert rivers.settings["system_prompt"] == "You are a poet."
    assert (rivers.settings["temperature"], rivers.settings["top_p"],
            rivers.settings["max_tokens"]) == (0.3, 0.8, 256)
    assert rivers.settings["top_k"] == 0 and rivers.settings["seed"] is None   # new: defaults
    assert (pasta.settings["temperature"], pasta.settings["max_tokens"]) == (1.2, 2048)
    assert [m.content for m in store.messages(3)] == ["a river poem"]      # not cascaded away
    assert store.get_setting("last_model") == "m.gguf"
    columns = [r[1] for r in store._db.execute("PRAGMA table_info(conversations)")]
    assert columns == ["id", "title", "settings", "created_at", "updated_at", "pinned",
                       "json_schema"]


def test_migrated_database_works_and_reopens(tmp_path):
    _old_database(tmp_path)
    store = Store(tmp_path)
    store.update_conversation(store.conversation(3).with_settings(top_k=40))
    new = store.create_conversation(Conversation(title="New"))
    store.add_message(new.id, 0, Message("user", "hi"))
    store.delete_conversation(3)                     # cascade works again after the rebuild
    assert store._db.execute("SELECT COUNT(*) FROM messages WHERE conversation_id=3"
                             ).fetchone()[0] == 0
    store.close()
    reopened = Store(tmp_path)
    assert [c.id for c in reopened.conversations()] == [new.id, 7]
    assert reopened.conversation(new.id).settings == Conversation().settings


def test_bad_stored_settings_fall_back_to_defaults(tmp_path):
    store = Store(tmp_path)
    conv = store.create_conversation(Conversation(title="x"))
    store._db.execute("UPDATE conversations SET settings=? WHERE id=?",
                      (json.dumps({"temperature": "hot", "top_p": 0.5, "gone": 1}), conv.id))
    loaded = store.conversation(conv.id)
    assert loaded.settings["temperature"] == Conversation().settings["temperature"]
    assert loaded.settings["top_p"] == 0.5 and "gone" not in loaded.settings


def test_messages_stored_before_the_reused_figure_open_and_take_it(tmp_path):
    _old_database(tmp_path)
    store = Store(tmp_path)
    old = store.messages(3)[0]
    assert old.content == "a river poem" and old.cached_tokens is None
    msg_id = store.add_message(3, 1, Message("assistant", "flowing", prompt_tokens=1060,
                                             cached_tokens=1024))
    store.close()
    again = Store(tmp_path)                   # the column is added once, then kept
    reply = [m for m in again.messages(3) if m.id == msg_id][0]
    assert (reply.cached_tokens, reply.prompt_tokens) == (1024, 1060)
    again.close()
