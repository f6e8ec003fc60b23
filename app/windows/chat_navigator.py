"""Which conversation shows where: new chats, opening one from the sidebar (in the
active pane or a new one), closing panes, deleting chats, the chat shown at start,
and one prompt sent to every pane."""
from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMessageBox

from app.storage.store import UNTOUCHED_TITLE


class ChatNavigator(QObject):
    def __init__(self, window, parent=None):
        super().__init__(parent or window)
        self._window = window
        self.panes, self.sessions, self.sidebar = window.panes, window.sessions, window.sidebar
        self.panes.pane_close_requested.connect(self.close_pane)
        self.panes.active_changed.connect(self._on_panes_active_changed)
        self.panes.panes_changed.connect(self._on_panes_panes_changed)
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.open_requested.connect(self.open_conversation)
        self.sidebar.delete_requested.connect(self.confirm_delete_conversation)

    def new_conversation(self, new_pane: bool = True):
        active = self.panes.active
        if not new_pane and active is not None and self._untouched(active.session):
            active.composer.setFocus()        # the active chat is already a new one
            return active
        session = self.sessions.create(self._window.settings)
        if session is None:                   # the database refused (it said why)
            return active
        pane = self._show(session, new_pane)
        pane.composer.setFocus()
        return pane

    def open_conversation(self, conv_id: int, new_pane: bool = False):
        pane = self.panes.pane_for(conv_id)
        if pane is None:
            session = self.sessions.get(conv_id)
            if session is None:
                return None
            pane = self._show(session, new_pane)
        self.panes.set_active(pane)
        self.sidebar.select(conv_id)
        return pane

    def close_pane(self, pane) -> None:
        self.panes.remove_pane(pane)

    def confirm_delete_conversation(self, conv_id: int) -> bool:
        """Ask first (the sidebar's Delete); True if it was deleted."""
        conv = self._window.store.conversation(conv_id)
        if conv is None:
            return False
        answer = QMessageBox.question(
            self._window, "Delete chat", f"Delete “{conv.title}” and all its messages?\n"
            "This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        if answer != QMessageBox.StandardButton.Yes:
            return False
        self.delete_conversation(conv_id)
        return True

    def delete_conversation(self, conv_id: int) -> None:
        pane = self.panes.pane_for(conv_id)
        if pane is not None:
            self.panes.remove_pane(pane)
        self.sessions.delete(conv_id)

    def broadcast_prompt(self, text: str) -> int:
        panes = self.panes.panes()
        if not panes:                 # nothing open: a new chat gets the prompt
            panes = [self.new_conversation()]
            self._window.statusBar().showMessage(
                "No chat was open: sent the prompt to a new chat.", 8000)
        for pane in panes:
            pane.session.send(text)
        return len(panes)

    def open_start_chat(self) -> None:
        """At start: reuse an empty "New chat" rather than add one more each time,
        and drop the other empty ones that no pane shows."""
        shown = {p.session.conversation.id for p in self.panes.panes()}
        spare = [i for i in self._window.store.untouched_conversation_ids() if i not in shown]
        if not self.panes.panes():
            if spare:
                self.open_conversation(spare.pop(0), new_pane=True)
            else:
                self.new_conversation()
        for conv_id in spare:
            self.sessions.delete(conv_id)

    def _show(self, session, new_pane: bool):
        active = self.panes.active
        if active is not None and (not new_pane or not self.panes.can_add()):
            return self.panes.replace_session(active, session)
        return self.panes.add_pane(session)

    def _untouched(self, session) -> bool:
        return session.conversation.title == UNTOUCHED_TITLE and session.model.rowCount() == 0

    # slots
    def _on_panes_active_changed(self, pane) -> None:
        self.sidebar.select(pane.session.conversation.id if pane is not None else None)

    def _on_panes_panes_changed(self) -> None:
        self._window.conversations.set_open_ids(
            p.session.conversation.id for p in self.panes.panes())
