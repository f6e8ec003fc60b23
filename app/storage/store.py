"""SQLite persistence (stdlib sqlite3, WAL) for conversations, messages and
settings. Used only from the GUI thread; every call is short."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from app.storage.conversation import Conversation
from app.storage.message import Message, MessageState
from app.storage.message_versions import records_from_json, synced_versions
from app.storage.schema_migration import (
    add_missing_conversation_columns,
    add_missing_message_columns,
    migrate_settings_column,
)
from app.storage.snippet_text import snippet
from engine.settings_spec import settings_or_defaults

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, settings TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL, updated_at REAL NOT NULL, pinned INTEGER NOT NULL DEFAULT 0,
    json_schema TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    state TEXT NOT NULL, ttft_s REAL, decode_tok_s REAL, num_tokens INTEGER,
    prompt_tokens INTEGER, model TEXT NOT NULL DEFAULT '', error TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL, versions TEXT NOT NULL DEFAULT '[]',
    version INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, position);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# A conversation's settings (engine/settings_spec.py) are one JSON object: a new
# setting needs no schema change; a stored one the spec no longer has is ignored.
_CONV_COLS = "title, settings, created_at, updated_at, pinned, json_schema"
_MSG_COLS = ("role, content, state, ttft_s, decode_tok_s, num_tokens, prompt_tokens, model, "
             "error, created_at, versions, version, cached_tokens")


UNTOUCHED_TITLE = Conversation().title


DB_NAME = "tandem.sqlite3"
# SQLite's result codes for "not a database" and "database disk image is malformed".
_CORRUPT_CODES = {sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT}


class StoreCorruptError(Exception):
    """The database file is damaged (app/storage/store_opening.py moves it aside)."""


def is_corruption(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) in _CORRUPT_CODES or "malformed" in str(exc)


class Store:
    def __init__(self, folder: Path, in_memory: bool = False):
        """in_memory: the folder cannot be written; the database (if it can be read) is
        copied into memory and nothing reaches the disk."""
        self.path = Path(folder) / DB_NAME
        self.in_memory = in_memory
        if in_memory:
            self._db = _memory_copy(self.path)
        else:
            Path(folder).mkdir(parents=True, exist_ok=True)
            if self.path.is_file():
                # Checked read-only first: a read-write connection to a damaged file
                # may drop its -wal when it closes, and nothing is deleted here.
                self._db = sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True)
                try:
                    self._check_integrity()
                finally:
                    self._db.close()
            self._db = sqlite3.connect(self.path)
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        migrate_settings_column(self._db)      # databases written before the JSON column
        self._db.executescript(_SCHEMA)
        # Databases written before Regenerate kept answers, the reused-tokens stat, pins.
        add_missing_message_columns(self._db)
        add_missing_conversation_columns(self._db)
        self.num_interrupted = self._mark_interrupted()

    def _check_integrity(self) -> None:
        """A damaged file is refused now, not at the first query that reads a bad page."""
        try:
            verdict = self._db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as e:
            if is_corruption(e):
                raise StoreCorruptError(f"{self.path}: {e}") from e
            raise
        if verdict != "ok":
            raise StoreCorruptError(f"{self.path}: {verdict}")

    def close(self) -> None:
        self._db.close()

    def _mark_interrupted(self) -> int:
        """A message still 'streaming' at open time was cut by a quit or crash."""
        with self._db:
            cur = self._db.execute("UPDATE messages SET state=? WHERE state=?",
                                   (MessageState.INTERRUPTED, MessageState.STREAMING))
        return cur.rowcount

    # conversations
    def create_conversation(self, conv: Conversation) -> Conversation:
        with self._db:
            cur = self._db.execute(
                f"INSERT INTO conversations ({_CONV_COLS}) VALUES (?,?,?,?,?,?)",
                _conv_values(conv))
        return conv.copy(id=cur.lastrowid)

    def update_conversation(self, conv: Conversation) -> None:
        sets = ", ".join(f"{c.strip()}=?" for c in _CONV_COLS.split(","))
        with self._db:
            self._db.execute(f"UPDATE conversations SET {sets} WHERE id=?",
                             (*_conv_values(conv), conv.id))

    def touch_conversation(self, conv_id: int) -> None:
        with self._db:
            self._db.execute("UPDATE conversations SET updated_at=? WHERE id=?",
                             (time.time(), conv_id))

    def delete_conversation(self, conv_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM conversations WHERE id=?", (conv_id,))

    def conversation(self, conv_id: int) -> Conversation | None:
        row = self._db.execute(f"SELECT id, {_CONV_COLS} FROM conversations WHERE id=?",
                               (conv_id,)).fetchone()
        return _conv_from_row(row) if row else None

    def conversations(self, search: str = "") -> list[Conversation]:
        """Pinned first, then newest first; `search` matches titles and message text."""
        query = f"SELECT id, {_CONV_COLS} FROM conversations"
        args: tuple = ()
        if search.strip():
            like = f"%{search.strip()}%"
            query += (" WHERE title LIKE ? OR id IN (SELECT conversation_id FROM messages"
                      " WHERE content LIKE ?)")
            args = (like, like)
        rows = self._db.execute(query + " ORDER BY pinned DESC, updated_at DESC, id DESC", args).fetchall()
        convs = [_conv_from_row(r) for r in rows]
        for conv in convs:
            conv.snippet = self._snippet(conv.id)
        return convs

    def untouched_conversation_ids(self) -> list[int]:
        """Newest first: chats still titled "New chat" with no message."""
        rows = self._db.execute(
            "SELECT id FROM conversations WHERE title=? AND id NOT IN "
            "(SELECT conversation_id FROM messages) ORDER BY updated_at DESC, id DESC",
            (UNTOUCHED_TITLE,)).fetchall()
        return [r[0] for r in rows]

    def _snippet(self, conv_id: int) -> str:
        row = self._db.execute("SELECT content FROM messages WHERE conversation_id=? "
                               "AND content != '' ORDER BY position DESC LIMIT 1", (conv_id,)).fetchone()
        return snippet(row[0]) if row else ""

    # messages
    def messages(self, conv_id: int) -> list[Message]:
        rows = self._db.execute(f"SELECT id, {_MSG_COLS} FROM messages WHERE conversation_id=?"
                                " ORDER BY position", (conv_id,)).fetchall()
        return [_message_from_row(r) for r in rows]

    def add_message(self, conv_id: int, position: int, msg: Message) -> int:
        with self._db:
            cur = self._db.execute(
                f"INSERT INTO messages (conversation_id, position, {_MSG_COLS}) "
                f"VALUES (?,?{',?' * len(_msg_values(msg))})",
                (conv_id, position, *_msg_values(msg)))
            self._db.execute("UPDATE conversations SET updated_at=? WHERE id=?",
                             (time.time(), conv_id))
        return cur.lastrowid

    def update_message(self, msg: Message) -> None:
        sets = ", ".join(f"{c.strip()}=?" for c in _MSG_COLS.split(","))
        with self._db:
            self._db.execute(f"UPDATE messages SET {sets} WHERE id=?", (*_msg_values(msg), msg.id))

    def truncate_messages(self, conv_id: int, position: int) -> None:
        """Delete messages at `position` and after (regenerate, edit-and-resend)."""
        with self._db:
            self._db.execute("DELETE FROM messages WHERE conversation_id=? AND position>=?",
                             (conv_id, position))

    # settings
    def get_setting(self, key: str, default=None):
        row = self._db.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_setting(self, key: str, value) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)",
                             (key, json.dumps(value)))


def _conv_values(c: Conversation) -> tuple:
    return (c.title, json.dumps(c.settings), c.created_at, c.updated_at, int(c.pinned),
            c.json_schema)


def _conv_from_row(row) -> Conversation:
    return Conversation(id=row[0], title=row[1], settings=_settings_from_json(row[2]),
                        created_at=row[3], updated_at=row[4], pinned=bool(row[5]),
                        json_schema=row[6] or "")


def _settings_from_json(text: str) -> dict:
    """Stored values where valid, else the chat defaults (never fail to open a chat)."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        data = None
    return settings_or_defaults(data if isinstance(data, dict) else None)


def _msg_values(m: Message) -> tuple:
    return (m.role, m.content, m.state, m.ttft_s, m.decode_tok_s, m.num_tokens,
            m.prompt_tokens, m.model, m.error, m.created_at, json.dumps(synced_versions(m)),
            m.version, m.cached_tokens)


def _message_from_row(row) -> Message:
    try:
        versions = records_from_json(json.loads(row[11]))
    except (TypeError, ValueError):
        versions = []
    version = row[12] if versions and 0 <= (row[12] or 0) < len(versions) else 0
    return Message(id=row[0], role=row[1], content=row[2], state=row[3], ttft_s=row[4],
                   decode_tok_s=row[5], num_tokens=row[6], prompt_tokens=row[7],
                   model=row[8], error=row[9], created_at=row[10], versions=versions,
                   version=version, cached_tokens=row[13])


def _memory_copy(path: Path) -> sqlite3.Connection:
    """A database in memory holding what `path` holds, if it can be read at all."""
    db = sqlite3.connect(":memory:")
    if path.is_file():
        try:
            # immutable: no lock, no -shm file (the folder cannot be written).
            source = sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True)
            try:
                source.backup(db)
            finally:
                source.close()
        except sqlite3.Error:
            db.close()
            db = sqlite3.connect(":memory:")
    return db
