"""Issue 17 item 9 (part of the fault-injection suite, docs/RELIABILITY.md; here for
the app fixtures): the disk fills while replies stream. Writes raise
sqlite3.OperationalError("database or disk is full") until space returns; nothing the
user typed or the model wrote is lost, Stop works, the user is told once, and
everything reaches the disk (finish reasons included) when space returns."""
from __future__ import annotations

import sqlite3

import pytest
from PySide6.QtCore import Qt

from app.storage.message import MessageState
from app.storage.store import Store

WRITES = ("add_message", "update_message", "truncate_messages", "set_setting",
          "update_conversation", "touch_conversation", "create_conversation",
          "delete_conversation")


class Disk:
    """Store writes raise "disk full" while `full` is set; counts the refusals."""

    def __init__(self, monkeypatch):
        self.full = False
        self.refused = 0
        for name in WRITES:
            original = getattr(Store, name)
            monkeypatch.setattr(Store, name, self._guard(original))

    def _guard(self, original):
        def write(store, *args, **kwargs):
            if self.full:
                self.refused += 1
                raise sqlite3.OperationalError("database or disk is full")
            return original(store, *args, **kwargs)
        return write


def _on_disk(data_dir, conv_id):
    store = Store(data_dir)
    try:
        return store.messages(conv_id)
    finally:
        store.close()


@pytest.fixture
def disk(monkeypatch):
    return Disk(monkeypatch)


def test_a_reply_streamed_while_the_disk_is_full_is_kept_and_saved_later(
        make_window, wait_until, qtbot, disk, data_dir):
    window = make_window(max_tokens=40)
    pane = window.panes.panes()[0]
    told = []
    window.store.failed.connect(told.append)
    disk.full = True
    qtbot.keyClicks(pane.composer, "first message")
    qtbot.keyClick(pane.composer, Qt.Key.Key_Return)
    wait_until(lambda: not pane.session.busy)           # the end is not lost
    assert disk.refused > 0 and len(told) == 1 and "disk is full" in told[0]
    assert window.storage_banner.isVisible() and "kept in memory" in (
        window.storage_banner.text())
    reply = pane.session.model.message(1)
    assert reply.state in (MessageState.DONE, MessageState.LENGTH) and reply.content
    # Typed while the disk is still full: kept (in the chat, not cleared into nowhere).
    qtbot.keyClicks(pane.composer, "second message")
    qtbot.keyClick(pane.composer, Qt.Key.Key_Return)
    wait_until(lambda: not pane.session.busy)
    assert len(told) == 1                               # told once
    conv = pane.session.conversation.id
    assert _on_disk(data_dir, conv) == []
    disk.full = False                                   # space returns: the retry saves
    wait_until(lambda: not window.storage_banner.isVisible())
    saved = _on_disk(data_dir, conv)
    shown = pane.session.model.messages()
    assert [(m.role, m.content, m.state) for m in saved] == [
        (m.role, m.content, m.state) for m in shown]
    assert [m.content for m in saved if m.role == "user"] == ["first message",
                                                              "second message"]
    assert window.store.num_unsaved == 0


def test_stop_works_while_the_disk_is_full(make_window, wait_until, disk, data_dir,
                                           endless_model_path):
    window = make_window(max_tokens=4000, model=endless_model_path)   # still streaming
    session = window.panes.panes()[0].session
    session.send("a long one")
    wait_until(lambda: (session.model.message(1).num_tokens or 0) >= 3)
    disk.full = True
    session.stop()
    wait_until(lambda: not session.busy)
    assert session.model.message(1).state == MessageState.STOPPED
    wait_until(lambda: disk.refused > 0)
    disk.full = False
    assert window.store.flush()
    saved = _on_disk(data_dir, session.conversation.id)
    assert saved[-1].state == MessageState.STOPPED
    assert saved[-1].content == session.model.message(1).content


def test_regenerate_while_full_keeps_the_order_of_writes(make_window, wait_until, disk,
                                                        data_dir):
    window = make_window(max_tokens=6)
    session = window.panes.panes()[0].session
    session.send("one")
    wait_until(lambda: not session.busy)
    disk.full = True
    session.regenerate(1)                # a truncation, then a new reply, all queued
    wait_until(lambda: not session.busy)
    session.send("two")
    wait_until(lambda: not session.busy)
    disk.full = False
    assert window.store.flush()
    saved = _on_disk(data_dir, session.conversation.id)
    assert [(m.role, m.content) for m in saved] == [
        (m.role, m.content) for m in session.model.messages()]
    assert len(saved) == 4


def test_new_chat_and_delete_while_full_say_why_and_lose_nothing(make_window, disk,
                                                                 data_dir):
    window = make_window(load=False)
    pane = window.panes.panes()[0]
    other = window.new_conversation(True)
    gone = other.session.conversation.id
    window.close_pane(other)
    disk.full = True
    assert window.new_conversation(True) is pane          # refused, said why
    assert "Cannot start a new chat" in window.last_error
    window.sessions.delete(gone)                          # queued
    disk.full = False
    assert window.store.flush()
    store = Store(data_dir)
    try:
        assert store.conversation(gone) is None
    finally:
        store.close()
