"""Brings databases written by older versions up to the current schema.

add_missing_message_columns: messages written before a column was added get it:
`versions` (JSON list) and `version` (selected index) from when Regenerate began to
keep earlier answers (each old message keeps its one answer as it was), and
`cached_tokens` (prompt tokens reused from the prompt cache; NULL: not known).

add_missing_conversation_columns: conversations get `pinned` (0: not pinned) and
`json_schema` (the schema replies follow; '': none).

migrate_settings_column: moves conversations written before the JSON settings column into it.

Until then each setting had its own column (system_prompt, temperature, top_p,
max_tokens). Every old column whose name is a setting in engine/settings_spec.py
is folded into `settings`, the table is rebuilt without them, and messages keep
pointing at the same conversation ids. Runs once: a migrated table has `settings`.
"""
from __future__ import annotations

import json
import sqlite3

from engine.settings_spec import BY_NAME

_NEW_TABLE = """CREATE TABLE conversations_new (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, settings TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL, updated_at REAL NOT NULL)"""


# Message columns added after the first release: name -> SQL type and default.
_ADDED_MESSAGE_COLUMNS = {"versions": "TEXT NOT NULL DEFAULT '[]'",
                          "version": "INTEGER NOT NULL DEFAULT 0",
                          "cached_tokens": "INTEGER"}


def add_missing_message_columns(db: sqlite3.Connection) -> list[str]:
    """Add the message columns an older database lacks; returns their names."""
    have = {r[1] for r in db.execute("PRAGMA table_info(messages)")}
    added = [c for c in _ADDED_MESSAGE_COLUMNS if c not in have]
    with db:
        for name in added:
            db.execute(f"ALTER TABLE messages ADD COLUMN {name} {_ADDED_MESSAGE_COLUMNS[name]}")
    return added


_ADDED_CONVERSATION_COLUMNS = {"pinned": "INTEGER NOT NULL DEFAULT 0",
                               "json_schema": "TEXT NOT NULL DEFAULT ''"}


def add_missing_conversation_columns(db: sqlite3.Connection) -> list[str]:
    """Add the conversation columns an older database lacks; returns their names."""
    have = {r[1] for r in db.execute("PRAGMA table_info(conversations)")}
    added = [c for c in _ADDED_CONVERSATION_COLUMNS if c not in have]
    with db:
        for name in added:
            db.execute(f"ALTER TABLE conversations ADD COLUMN {name} "
                       f"{_ADDED_CONVERSATION_COLUMNS[name]}")
    return added


def migrate_settings_column(db: sqlite3.Connection) -> bool:
    """True if the table was migrated; False if there was nothing to do."""
    columns = [r[1] for r in db.execute("PRAGMA table_info(conversations)")]
    if not columns or "settings" in columns:
        return False
    moved = [c for c in columns if c in BY_NAME]
    rows = db.execute(f"SELECT id, title, created_at, updated_at{''.join(', ' + c for c in moved)}"
                      " FROM conversations").fetchall()
    # Dropping the old table must not cascade to messages: foreign keys off meanwhile
    # (the pragma is a no-op inside a transaction, so set it before BEGIN).
    db.execute("PRAGMA foreign_keys=OFF")
    try:
        db.execute("BEGIN")
        db.execute("DROP TABLE IF EXISTS conversations_new")
        db.execute(_NEW_TABLE)
        db.executemany("INSERT INTO conversations_new (id, title, settings, created_at, "
                       "updated_at) VALUES (?,?,?,?,?)",
                       [(*r[:2], json.dumps(dict(zip(moved, r[4:]))), *r[2:4]) for r in rows])
        db.execute("DROP TABLE conversations")
        db.execute("ALTER TABLE conversations_new RENAME TO conversations")
        db.commit()
    except sqlite3.Error:
        db.rollback()
        raise
    finally:
        db.execute("PRAGMA foreign_keys=ON")
    return True

