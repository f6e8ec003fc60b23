"""Two panes streaming, a third conversation starts: its prompt is read beside them
(issue 21: the streams froze and the new prompt waited 25-35x its alone time). On the
real engine and a tiny model; event order and counts, never wall time."""
from __future__ import annotations

from PySide6.QtCore import Qt

from engine.core.shapes import MIN_CHUNK

LONG_PROMPT = "Tell me about the history of the river and the bridges over it. " * 12


def _reply(pane):
    model = pane.session.model
    return model.message(model.last_row())


def test_a_third_conversation_is_read_while_two_others_keep_streaming(
        make_window, wait_until, qtbot, endless_model_path):
    window = make_window(max_tokens=400, model=endless_model_path)
    steps = []
    window.bridge.step.connect(steps.append)
    first = window.panes.panes()[0]
    second = window.new_conversation(True)
    for pane in (first, second):
        qtbot.keyClicks(pane.composer, "Tell me a story")
        qtbot.keyClick(pane.composer, Qt.Key.Key_Return)
    wait_until(lambda: all(_reply(p).num_tokens >= 4 for p in (first, second)))
    streams = {first.session.request_id, second.session.request_id}

    third = window.new_conversation(True)
    third.composer.setPlainText(LONG_PROMPT)
    qtbot.keyClick(third.composer, Qt.Key.Key_Return)
    new_id = third.session.request_id
    arrived = len(steps)
    wait_until(lambda: _reply(third).num_tokens >= 1)
    assert first.session.busy and second.session.busy   # its first token came first

    reading = [s for s in steps[arrived:] if new_id in s.prefill_request_ids]
    prompt_tokens = sum(s.prefill_tokens for s in reading)
    assert prompt_tokens > 2 * MIN_CHUNK                   # read in more than one chunk
    # The streams move in every step that reads it (one mixed forward each)...
    assert all(streams <= set(s.decode_request_ids) for s in reading)
    assert all(s.kind == "mixed" for s in reading)
    # ...and its wait is bounded in steps: at most one smallest chunk a step.
    assert len(reading) <= -(-prompt_tokens // MIN_CHUNK)
    for pane in (first, second, third):
        pane.session.stop()
    wait_until(lambda: not any(p.session.busy for p in (first, second, third)))
