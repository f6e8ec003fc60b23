"""Issue 22 item 15: a shortcut list in Help, a context-usage meter per pane, "Stop
all" beside "Send to all", and Continue for a stopped reply (real engine, tiny model)."""
from __future__ import annotations

from app.storage.message import MessageState


def _reply(pane):
    return pane.session.model.message(pane.session.model.last_row())


def test_help_lists_the_shortcuts_from_the_menus(make_window):
    window = make_window(load=False)
    dialog = window.show_shortcuts()
    rows = dict((does, keys) for keys, does in dialog.rows)
    assert "Ctrl+N" in rows["File → New chat"]
    assert "Ctrl+O" in rows["Model → Open model"]
    assert "Ctrl+Shift+." in rows["File → Stop all replies"]
    assert "Ctrl+/" in rows["Help → Keyboard shortcuts"]
    assert rows["Send the message"] == "Enter" and "Esc" in rows.values()
    assert dialog.table.rowCount() == len(dialog.rows)


def test_the_context_meter_counts_the_conversation(make_window, wait_until):
    window = make_window(max_tokens=6)
    pane = window.panes.panes()[0]
    total = window.bridge.engine.config.max_context
    assert pane.context.text() == f"0 / {total / 1000:.1f}k"
    pane.session.send("hello there")
    wait_until(lambda: not pane.session.busy)
    reply = _reply(pane)
    used = reply.prompt_tokens + reply.num_tokens
    assert used > 0 and pane.context.used == used and pane.context.total == total
    assert f"{used:,} of {total:,} tokens" in pane.context.toolTip()
    pane.context.set_usage(total - 10, total)
    assert pane.context.property("warn") is True


def test_stop_all_stops_every_pane(make_window, wait_until, endless_model_path):
    window = make_window(max_tokens=4000, model=endless_model_path)   # still streaming
    first = window.panes.panes()[0]
    second = window.new_conversation(True)
    stop = window.broadcast.stop_button
    assert not stop.isEnabled()
    assert window.broadcast_prompt("Tell me a long story") == 2
    assert stop.isEnabled()
    wait_until(lambda: all((_reply(p).num_tokens or 0) >= 1 for p in (first, second)))
    stop.click()
    wait_until(lambda: not first.session.busy and not second.session.busy)
    assert {_reply(p).state for p in (first, second)} == {MessageState.STOPPED}
    assert not stop.isEnabled()


def test_continue_carries_on_a_stopped_reply(make_window, wait_until):
    window = make_window(max_tokens=8)
    pane = window.panes.panes()[0]
    pane.session.send("Tell me a story")
    wait_until(lambda: not pane.session.busy)
    reply = _reply(pane)
    assert reply.state == MessageState.LENGTH
    widget = pane.view.message_widgets()[-1]
    assert not widget.buttons["continue"].isHidden()
    before, tokens = reply.content, reply.num_tokens
    prompts = []
    submit = window.bridge.submit
    window.bridge.submit = lambda prompt, *a: prompts.append(prompt) or submit(prompt, *a)
    widget.buttons["continue"].click()
    assert pane.session.busy
    wait_until(lambda: not pane.session.busy)
    after = _reply(pane)
    assert pane.session.model.rowCount() == 2                # the same reply, grown
    assert after.content.startswith(before) and len(after.content) > len(before)
    assert after.num_tokens > tokens and after.state == MessageState.LENGTH
    assert all(isinstance(t, int) for t in prompts[0])       # the answer so far, as its start
    tok = window.bridge.engine.tokenizer
    assert prompts[0][-len(tok.encode(before)):] == tok.encode(before)
    # Only the last reply, and only one cut short, can be continued.
    pane.session.send("next")
    wait_until(lambda: not pane.session.busy)
    assert pane.view.message_widgets()[1].buttons["continue"].isHidden()
    assert not pane.session.continue_reply(1)
