"""A conversation's JSON schema (set in its settings dialog, checked before it is kept,
shown on the pane, stored, constraining replies through the engine's grammar mask) and
tool calls shown as their own blocks (read by the parser the API server uses)."""
from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import REAL_ENGINE

from app.chat.message_widget import MessageWidget
from app.chat.tool_call_text import split_tool_calls
from app.storage.conversation import Conversation
from app.storage.message import Message, MessageState
from app.storage.store import Store
from app.windows.conversation_settings_dialog import ConversationSettingsDialog

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 6},
    "n": {"type": "integer", "minimum": 0, "maximum": 99},
    "ok": {"type": "boolean"}},
    "required": ["city", "n", "ok"], "additionalProperties": False}
JSON_CALL = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": '
             '{"city": "Paris", "days": 2}}\n</tool_call>')
XML_CALL = ("<tool_call>\n<function=search>\n<parameter=query>\nfox news\n</parameter>\n"
            "<parameter=limit>\n3\n</parameter>\n</function>\n</tool_call>")


def _reply(pane):
    return pane.session.model.message(pane.session.model.last_row())


# tool calls: the server's parser, as blocks
def test_the_answer_splits_into_text_and_calls_as_the_server_reads_them():
    json_call = split_tool_calls(JSON_CALL)
    assert json_call.text == "Let me look." and not json_call.pending
    [call] = json_call.calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris", "days": 2})
    [xml] = split_tool_calls(XML_CALL).calls
    assert (xml.name, json.loads(xml.arguments)) == ("search", {"query": "fox news", "limit": 3})
    # Streaming: an open call is pending, its body not shown as text.
    half = split_tool_calls(JSON_CALL[:-20], streaming=True)
    assert half.pending and not half.calls and half.text == "Let me look."
    # Not a call: kept as the model wrote it.
    odd = "<tool_call>not a call</tool_call>"
    assert split_tool_calls(odd).text == odd and not split_tool_calls(odd).calls


def test_a_reply_with_tool_calls_shows_one_block_each(qtbot):
    widget = MessageWidget(Message("assistant", JSON_CALL + "\n" + XML_CALL,
                                   state=MessageState.DONE))
    qtbot.addWidget(widget)
    blocks = widget.calls.blocks
    assert [b.call.name for b in blocks] == ["get_weather", "search"]
    assert blocks[0].title.text() == "Tool call · get_weather"
    assert json.loads(blocks[0].arguments.code()) == {"city": "Paris", "days": 2}
    assert "\n  " in blocks[0].arguments.code()             # indented, one key a line
    assert not widget.calls.isHidden() and not widget.body.isHidden()
    shown = widget.body._text
    assert "Let me look." in shown and "<tool_call>" not in shown and "get_weather" not in shown


def test_a_call_being_streamed_is_a_pending_block_then_the_call(qtbot):
    msg = Message("assistant", XML_CALL[:40], state=MessageState.STREAMING, num_tokens=5)
    widget = MessageWidget(msg)
    qtbot.addWidget(widget)
    [pending] = widget.calls.blocks
    assert pending.call is None and pending.title.text() == "Tool call…"
    assert widget.body.isHidden()                  # no raw template text meanwhile
    widget.set_message(Message("assistant", XML_CALL, state=MessageState.DONE, num_tokens=9))
    [done] = widget.calls.blocks
    assert done is pending and done.call.name == "search"   # the block was reused


def test_a_plain_reply_has_no_call_blocks(qtbot):
    widget = MessageWidget(Message("assistant", "Just text.", state=MessageState.DONE))
    qtbot.addWidget(widget)
    assert widget.calls.blocks == [] and widget.calls.isHidden()


# the schema setting
@pytest.mark.parametrize("text, says", [
    ("{not json", "not JSON"),
    ("[1, 2]", "object"),
    ('{"type": "bogus"}', "bogus"),
])
def test_the_dialog_refuses_a_schema_it_cannot_use_and_says_why(qtbot, text, says):
    dialog = ConversationSettingsDialog(Conversation(id=1))
    qtbot.addWidget(dialog)
    dialog.open()
    dialog.schema.setPlainText(text)
    dialog.accept()
    assert dialog.isVisible() and dialog.result() == 0          # still open
    assert says in dialog.schema_error.text() and not dialog.schema_error.isHidden()
    dialog.schema.setPlainText(json.dumps(SCHEMA))
    with qtbot.waitSignal(dialog.accepted):
        dialog.accept()
    assert dialog.conversation().schema == SCHEMA


def test_the_schema_is_stored_with_the_conversation_and_old_databases_get_it(tmp_path):
    store = Store(tmp_path)
    conv = store.create_conversation(Conversation(json_schema=json.dumps(SCHEMA)))
    store.close()
    again = Store(tmp_path)
    assert again.conversation(conv.id).schema == SCHEMA
    again.close()
    old = tmp_path / "old"
    old.mkdir()
    db = sqlite3.connect(old / "tandem.sqlite3")
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,
            settings TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL,
            updated_at REAL NOT NULL, pinned INTEGER NOT NULL DEFAULT 0);
        INSERT INTO conversations VALUES (4, 'Before schemas', '{}', 1.0, 2.0, 1);""")
    db.close()
    store = Store(old)
    (conv,) = store.conversations()
    assert (conv.id, conv.pinned, conv.json_schema, conv.schema) == (4, True, "", None)
    store.update_conversation(conv.copy(json_schema=json.dumps(SCHEMA)))
    assert store.conversation(4).schema == SCHEMA
    store.close()


@pytest.mark.skipif(not REAL_ENGINE, reason="needs the real engine (the grammar's mask)")
def test_a_schema_constrained_reply_parses_validates_and_shares_the_batch(
        make_window, wait_until, endless_model_path):
    # The plain reply never ends by itself (no end-of-text), so it is still decoding
    # while the constrained one runs, however fast the machine; the grammar ends that
    # one (only EOS is allowed once the object is complete).
    window = make_window(max_tokens=120, model=endless_model_path)
    steps = []
    window.bridge.step.connect(steps.append)
    constrained = window.panes.panes()[0]
    plain = window.new_conversation(True)
    assert constrained.schema_badge.isHidden()
    conv = constrained.session.conversation
    constrained.session.update_conversation(conv.copy(json_schema=json.dumps(SCHEMA)))
    assert not constrained.schema_badge.isHidden() and plain.schema_badge.isHidden()
    assert '"city"' in constrained.schema_badge.toolTip()
    for pane in (constrained, plain):      # sent together: one batch, one row masked
        assert pane.session.send("Where is the fox?")
    constrained_id = constrained.session.request_id
    wait_until(lambda: not constrained.session.busy and not plain.session.busy)
    reply = _reply(constrained)
    assert reply.state == MessageState.DONE, reply.content
    jsonschema.validate(json.loads(reply.content), SCHEMA)
    assert _reply(plain).state == MessageState.LENGTH
    assert any(s.batch_size == 2 and constrained_id in s.decode_request_ids for s in steps)
    # The schema is the conversation's: it comes back after a restart of the window.
    window.close()
    again = make_window(load=False)
    [reopened] = [p for p in again.panes.panes()
                  if p.session.conversation.id == conv.id]
    assert reopened.session.conversation.schema == SCHEMA
    assert not reopened.schema_badge.isHidden()


@pytest.mark.skipif(not REAL_ENGINE, reason="needs the real engine (the grammar's mask)")
def test_continue_keeps_a_cut_reply_inside_its_schema(make_window, wait_until):
    # 12 tokens a turn cannot hold the object: each Continue goes on under the grammar,
    # which has read the answer so far.
    window = make_window(max_tokens=12)
    pane = window.panes.panes()[0]
    session = pane.session
    session.update_conversation(session.conversation.copy(json_schema=json.dumps(SCHEMA)))
    assert session.send("Where is the fox?")
    wait_until(lambda: not session.busy)
    assert _reply(pane).state == MessageState.LENGTH
    for _ in range(20):
        if _reply(pane).state != MessageState.LENGTH:
            break
        assert session.continue_reply(session.model.last_row())
        wait_until(lambda: not session.busy)
    reply = _reply(pane)
    assert reply.state == MessageState.DONE, reply.content
    jsonschema.validate(json.loads(reply.content), SCHEMA)
