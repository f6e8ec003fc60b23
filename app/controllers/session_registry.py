"""The open conversations' ChatSessions, by conversation id; also says which
replies are in flight and what each is doing, for the status panel."""
from __future__ import annotations

import sqlite3

from PySide6.QtCore import QObject, Signal

from app.controllers.chat_session import ChatSession
from app.status.activity import Activity
from app.storage.conversation import Conversation


class SessionRegistry(QObject):
    """Signals:
        changed(): a conversation was created, renamed, updated or deleted
        error(str): a session could not submit
        busy_changed(bool): whether any session has a reply in flight
    """
    changed = Signal()
    error = Signal(str)
    busy_changed = Signal(bool)

    def __init__(self, store, bridge, parent=None):
        super().__init__(parent)
        self._store, self._bridge = store, bridge
        self._sessions: dict[int, ChatSession] = {}

    def create(self, settings) -> ChatSession | None:
        """None (and error emitted) when the database cannot take a new chat now."""
        try:
            conv = self._store.create_conversation(Conversation(settings=dict(settings.chat)))
        except sqlite3.Error as e:      # disk full: a new chat needs its id at once
            self.error.emit(f"Cannot start a new chat: the history cannot be saved ({e}). "
                            "Free some disk space and try again; open chats keep working.")
            return None
        self.changed.emit()
        return self.get(conv.id)

    def get(self, conv_id: int) -> ChatSession | None:
        if conv_id not in self._sessions:
            conv = self._store.conversation(conv_id)
            if conv is None:
                return None
            session = ChatSession(conv, self._store, self._bridge, self)
            session.conversation_changed.connect(self.changed)
            session.error.connect(self.error)
            session.busy_changed.connect(self._on_session_busy_changed)
            self._sessions[conv_id] = session
        return self._sessions[conv_id]

    def sessions(self) -> list[ChatSession]:
        return list(self._sessions.values())

    def rename(self, conv_id: int, title: str) -> None:
        session = self.get(conv_id)
        if session is not None:
            session.update_conversation(session.conversation.copy(title=title))

    def set_pinned(self, conv_id: int, pinned: bool) -> None:
        """Pinned chats stay at the top of the sidebar (saved with the chat)."""
        session = self.get(conv_id)
        if session is not None and session.conversation.pinned != pinned:
            session.update_conversation(session.conversation.copy(pinned=pinned))

    def delete(self, conv_id: int) -> None:
        session = self._sessions.pop(conv_id, None)
        if session is not None:
            session.close()
            session.deleteLater()
            self.busy_changed.emit(self.busy)
        self._store.delete_conversation(conv_id)
        self.changed.emit()

    def activity(self) -> list[Activity]:
        """The replies in flight and what each is doing, for the status panel."""
        return [Activity(s.request_id, s.title, s.phase) for s in self._sessions.values()
                if s.busy]

    @property
    def busy(self) -> bool:
        return any(s.busy for s in self._sessions.values())

    def stop_all(self) -> int:
        """Stop every reply in flight; returns how many were stopped."""
        busy = [s for s in self._sessions.values() if s.busy]
        for session in busy:
            session.stop()
        return len(busy)

    def _on_session_busy_changed(self, _busy: bool) -> None:
        self.busy_changed.emit(self.busy)

    def close_all(self) -> None:
        for session in self._sessions.values():
            session.close()
