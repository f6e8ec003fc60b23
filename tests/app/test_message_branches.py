"""Issue 22 item 12: Edit and resend keeps the old question and every turn after it
as a version of the user message ("‹ 1/2 ›", as on answers); Regenerate keeps the
turns after an answer with the old answer (real engine, tiny model)."""
from __future__ import annotations

from app.storage.message import Message
from app.storage.message_branches import from_record, to_record, with_branch, with_edit


def _contents(session):
    return [m.content for m in session.model.messages()]


def _two_turns(make_window, wait_until):
    window = make_window(max_tokens=4)
    pane = window.panes.panes()[0]
    for text in ("hello", "second question"):
        pane.session.send(text)
        wait_until(lambda: not pane.session.busy)
    return window, pane


def test_editing_keeps_the_old_branch_as_a_version(make_window, wait_until):
    window, pane = _two_turns(make_window, wait_until)
    session = pane.session
    before = _contents(session)
    widget = pane.view.message_widgets()[0]
    widget.start_edit()
    widget.editor.setPlainText("hello again")
    widget.buttons["send_edit"].click()
    wait_until(lambda: not session.busy)
    assert _contents(session)[0] == "hello again" and session.model.rowCount() == 2
    switcher = pane.view.message_widgets()[0].versions
    assert switcher.isVisible() and switcher.label.text() == "2/2"
    assert "message" in switcher.previous.toolTip()
    edited = _contents(session)
    switcher.previous.click()
    assert _contents(session) == before                     # the old question, its answers
    assert pane.view.message_widgets()[0].versions.label.text() == "1/2"
    stored = window.store.messages(session.conversation.id)
    assert [m.content for m in stored] == before
    pane.view.message_widgets()[0].versions.next.click()
    assert _contents(session) == edited
    assert [m.content for m in window.store.messages(session.conversation.id)] == edited


def test_branches_survive_a_restart(make_window, wait_until):
    window, pane = _two_turns(make_window, wait_until)
    before = _contents(pane.session)
    assert pane.session.edit_and_resend(2, "another second question")
    wait_until(lambda: not pane.session.busy)
    conv_id = pane.session.conversation.id
    window.close()
    again = make_window(load=False).panes.panes()[0]
    assert again.session.conversation.id == conv_id
    assert again.view.message_widgets()[2].versions.label.text() == "2/2"
    assert again.session.select_version(2, 0)
    assert _contents(again.session) == before


def test_regenerating_an_earlier_answer_keeps_the_turns_after_it(make_window, wait_until):
    window, pane = _two_turns(make_window, wait_until)
    session = pane.session
    before = _contents(session)
    pane.view.message_widgets()[1].buttons["regenerate"].click()
    wait_until(lambda: not session.busy)
    assert session.model.rowCount() == 2
    assert session.select_version(1, 0)
    assert _contents(session) == before


def test_branch_records_nest_and_round_trip():
    answer = Message("assistant", "a1", num_tokens=3)
    first = with_edit(Message("user", "q1"), "q2", [answer])
    assert (first.content, first.version, len(first.versions)) == ("q2", 1, 2)
    second = with_edit(first, "q3", [Message("assistant", "a2")])
    back = from_record(to_record(second))
    assert (back.content, back.version, len(back.versions)) == ("q3", 2, 3)
    shown, turns = with_branch(back, 0, [Message("assistant", "a3")])
    assert shown.content == "q1" and [t.content for t in turns] == ["a1"]
    assert turns[0].num_tokens == 3
    shown, turns = with_branch(shown, 2, turns)
    assert shown.content == "q3" and [t.content for t in turns] == ["a3"]
