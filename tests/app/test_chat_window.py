"""The window on a real engine (tiny random model): panes streaming together,
stop, regenerate, edit-and-resend, persistence, model errors, broadcast."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.storage.message import MessageState


def _reply(pane):
    model = pane.session.model
    return model.message(model.last_row())


def _steps(window):
    seen = []
    window.bridge.step.connect(seen.append)
    return seen


def test_two_panes_stream_in_one_batch(make_window, wait_until, qtbot, endless_model_path):
    # Replies of 600 tokens without an end-of-text: the first cannot be over before the
    # second request (sent right after it) joins the batch. (At 120 the first reply, ~0.1
    # s of the tiny model's steps, once ended before the second joined on a loaded CI
    # machine, session 26.)
    window = make_window(max_tokens=600, model=endless_model_path)
    steps = _steps(window)
    first = window.panes.panes()[0]
    second = window.new_conversation(True)
    streamed = {}
    for pane in (first, second):
        pane.session.model.dataChanged.connect(
            lambda *_a, p=pane: streamed.setdefault(p, _reply(p).content))
        qtbot.keyClicks(pane.composer, "Tell me a story")
    for pane in (first, second):      # typed first, so both requests go in together
        qtbot.keyClick(pane.composer, Qt.Key.Key_Return)
    assert first.session.busy and second.session.busy
    both = {first.session.request_id, second.session.request_id}
    wait_until(lambda: not first.session.busy and not second.session.busy)
    assert max(s.batch_size for s in steps) == 2
    assert any(both == set(s.decode_request_ids) for s in steps)   # one forward, two rows
    for pane in (first, second):
        reply = _reply(pane)
        assert pane in streamed                       # views heard of it while streaming
        assert reply.state in (MessageState.DONE, MessageState.LENGTH)
        assert reply.num_tokens > 0 and reply.ttft_s is not None
        assert "tokens" in pane.view.message_widgets()[-1].stats.text()


def test_enter_sends_shift_enter_adds_a_line(make_window, qtbot):
    pane = make_window(load=False).panes.panes()[0]
    qtbot.keyClicks(pane.composer, "line one")
    qtbot.keyClick(pane.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(pane.composer, "line two")
    assert pane.composer.toPlainText() == "line one\nline two"


def test_stop_keeps_text_marks_stopped_and_frees_pages(make_window, wait_until,
                                                       endless_model_path):
    window = make_window(max_tokens=4000, model=endless_model_path)   # still streaming
    steps = _steps(window)
    a = window.panes.panes()[0]
    b = window.new_conversation(True)
    a.session.send("first")
    b.session.send("second")
    rid_a = a.session.request_id
    wait_until(lambda: (_reply(a).num_tokens or 0) >= 4 and (_reply(b).num_tokens or 0) >= 4)
    a.view.message_widgets()[-1].buttons["stop"].click()
    wait_until(lambda: not a.session.busy)
    reply = _reply(a)
    assert reply.state == MessageState.STOPPED and reply.content and reply.num_tokens >= 4
    assert window.store.messages(a.session.conversation.id)[-1].state == MessageState.STOPPED
    n = len(steps)
    wait_until(lambda: len(steps) > n + 1)         # b keeps decoding (400 tokens)
    after = steps[-1]
    assert b.session.busy and after.batch_size == 1 and rid_a not in after.decode_request_ids
    # a's pages went back to the pool: a step reports the pool after it, so compare the
    # last step that still held both with the next one (b grows by a page at most).
    both = max(i for i, s in enumerate(steps) if s.num_running == 2)
    # (the stopped turn's pages now wait in the engine's cache for a follow-up,
    # where they are reclaimed on demand: running sequences hold fewer)
    held = [s.kv_pages_used - s.kv_pages_cached for s in (steps[both], steps[both + 1])]
    assert held[1] < held[0]
    b.session.stop()
    wait_until(lambda: not b.session.busy)


def test_regenerate_and_edit_replace_the_right_messages(make_window, wait_until):
    window = make_window(max_tokens=8)
    session = window.panes.panes()[0].session
    for text in ("one", "two"):
        session.send(text)
        wait_until(lambda: not session.busy)
    model = session.model
    assert [m.role for m in model.messages()] == ["user", "assistant"] * 2
    first_reply = model.message(1)
    pane = window.panes.panes()[0]
    pane.view.message_widgets()[1].buttons["regenerate"].click()   # the first reply
    wait_until(lambda: not session.busy)
    assert [m.content for m in model.messages() if m.role == "user"] == ["one"]
    assert model.rowCount() == 2 and model.message(1) is not first_reply
    assert model.message(1).state in (MessageState.DONE, MessageState.LENGTH)
    session.send("three")
    wait_until(lambda: not session.busy)
    widget = pane.view.message_widgets()[2]                          # user "three"
    widget.buttons["edit"].click()
    widget.editor.setPlainText("three, edited")
    widget.buttons["send_edit"].click()
    wait_until(lambda: not session.busy)
    users = [m.content for m in model.messages() if m.role == "user"]
    assert users == ["one", "three, edited"] and model.rowCount() == 4
    stored = window.store.messages(session.conversation.id)
    assert [m.content for m in stored] == [m.content for m in model.messages()]


def test_conversations_panes_and_stats_survive_reopening(make_window, wait_until, run):
    window = make_window(max_tokens=6)
    a = window.panes.panes()[0]
    b = window.new_conversation(True)
    for pane in (a, b):
        pane.session.send(f"hello from {pane.session.conversation.id}")
    wait_until(lambda: not a.session.busy and not b.session.busy)
    ids = [p.session.conversation.id for p in window.panes.panes()]
    texts = [p.session.model.messages() for p in window.panes.panes()]
    window.close()
    again = make_window(load=False)
    assert [p.session.conversation.id for p in again.panes.panes()] == ids
    for pane, before in zip(again.panes.panes(), texts):
        after = pane.session.model.messages()
        assert [(m.role, m.content, m.num_tokens) for m in after] == \
               [(m.role, m.content, m.num_tokens) for m in before]
        assert after[-1].decode_tok_s is not None
    assert set(ids) <= set(again.conversations.conversation_ids())


def test_broken_model_shows_error_and_previous_model_serves(make_window, wait_until, run,
                                                            tmp_path):
    window = make_window(max_tokens=4)
    name = window.bridge.model_name
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert not run(window.load_model(str(broken)))
    assert window.error_box is not None and window.error_box.isVisible()
    assert window.last_error and window.bridge.model_name == name
    session = window.panes.panes()[0].session
    assert session.send("still there?")
    wait_until(lambda: not session.busy)
    assert _reply(window.panes.panes()[0]).state in (MessageState.DONE, MessageState.LENGTH)


def test_broadcast_reaches_every_open_pane(make_window, wait_until, qtbot):
    window = make_window(max_tokens=4)
    window.new_conversation(True)
    window.new_conversation(True)
    panes = window.panes.panes()
    assert len(panes) == 3
    qtbot.keyClicks(window.broadcast.composer, "same question")
    window.broadcast.button.click()
    wait_until(lambda: not any(p.session.busy for p in panes))
    for pane in panes:
        assert pane.session.model.message(0).content == "same question"
        assert _reply(pane).role == "assistant" and _reply(pane).num_tokens


def test_sidebar_new_rename_search_delete(make_window, wait_until):
    window = make_window(load=False)
    first = window.panes.panes()[0].session.conversation.id
    window.new_conversation(True)
    model = window.conversations
    assert model.rowCount() == 2
    model.setData(model.index(model.row_of(first)), "Pasta recipes")
    assert window.store.conversation(first).title == "Pasta recipes"
    model.refresh("pasta")
    assert model.conversation_ids() == [first]
    model.refresh("")
    window.delete_conversation(first)
    assert window.panes.pane_for(first) is None and first not in model.conversation_ids()


@pytest.mark.parametrize("width, expected", [(1000, 4), (3000, 9)])
def test_pane_limit_grows_with_width(make_window, width, expected):
    window = make_window(load=False)
    window.panes.resize(width, 600)
    assert window.panes.max_panes == expected


def test_delete_from_the_sidebar_asks_first(make_window, monkeypatch):
    from PySide6.QtWidgets import QMessageBox
    window = make_window(load=False)
    conv_id = window.panes.panes()[0].session.conversation.id
    answers, asked = [QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Yes], []

    def question(parent, title, text, *args):
        asked.append(text)
        return answers.pop(0)
    monkeypatch.setattr(QMessageBox, "question", question)
    window.sidebar.delete_requested.emit(conv_id)
    assert asked and "New chat" in asked[0]
    assert conv_id in window.conversations.conversation_ids()      # cancelled: kept
    window.sidebar.delete_requested.emit(conv_id)
    assert conv_id not in window.conversations.conversation_ids()
    assert window.store.conversation(conv_id) is None


def test_an_empty_new_chat_is_not_added_again_on_each_start(make_window):
    first = make_window(load=False)
    ids = first.conversations.conversation_ids()
    assert len(ids) == 1
    first.close()
    assert make_window(load=False).conversations.conversation_ids() == ids   # normal restart
    store = make_window(load=False).store
    store.set_setting("window", None)           # as after a crash: no saved panes
    again = make_window(load=False)
    assert again.conversations.conversation_ids() == ids
    assert [p.session.conversation.id for p in again.panes.panes()] == ids
    again.new_conversation(False)               # "New chat" on an empty chat: no new one
    assert again.conversations.conversation_ids() == ids
