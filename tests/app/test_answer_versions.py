"""Regenerate keeps the earlier answers: "‹ 1/2 ›" switches between them, the choice
is stored, and the next turn is built on the answer shown (real engine, tiny model)."""
from __future__ import annotations

import sqlite3

from app.storage.message import Message
from app.storage.store import Store


def _regenerate(pane, row, wait_until):
    pane.view.message_widgets()[row].buttons["regenerate"].click()
    wait_until(lambda: not pane.session.busy)


def _sample_with(session, seed):
    """Sample at temperature 1 with a fixed seed: a random seed can draw end-of-text
    first (an empty answer, which the next prompt leaves out) or two equal answers."""
    session.conversation = session.conversation.with_settings(temperature=1.0, seed=seed)


def test_regenerate_keeps_answers_and_switches_between_them(make_window, wait_until,
                                                           endless_model_path):
    window = make_window(max_tokens=6, model=endless_model_path)
    pane = window.panes.panes()[0]
    session, model = pane.session, pane.session.model
    _sample_with(session, 1)
    session.send("hello")
    wait_until(lambda: not session.busy)
    first = model.message(1).content
    _sample_with(session, 2)
    _regenerate(pane, 1, wait_until)
    widget = pane.view.message_widgets()[1]
    assert model.rowCount() == 2 and len(model.message(1).versions) == 2
    assert widget.versions.isVisible() and widget.versions.label.text() == "2/2"
    assert not widget.versions.next.isEnabled() and widget.versions.previous.isEnabled()
    second = model.message(1).content
    assert first and second and second != first    # two seeds at temperature 1
    widget.versions.previous.click()
    assert model.message(1).content == first and widget.versions.label.text() == "1/2"
    stored = window.store.messages(session.conversation.id)[1]
    assert stored.content == first and stored.version == 0
    assert [v["content"] for v in stored.versions] == [first, second]


def test_the_next_turn_uses_the_selected_answer(make_window, wait_until, endless_model_path):
    window = make_window(max_tokens=6, model=endless_model_path)
    pane = window.panes.panes()[0]
    session, model = pane.session, pane.session.model
    _sample_with(session, 1)
    session.send("hello")
    wait_until(lambda: not session.busy)
    _sample_with(session, 2)
    _regenerate(pane, 1, wait_until)
    pane.view.message_widgets()[1].versions.previous.click()
    prompts = []
    submit = window.bridge.submit
    window.bridge.submit = lambda prompt, *a, **k: prompts.append(prompt) or submit(
        prompt, *a, **k)
    session.send("and then?")
    wait_until(lambda: not session.busy)
    first, second = (v["content"] for v in model.message(1).versions)
    assert first and second and first != second    # two seeds at temperature 1
    assert prompts[0][1:3] == [{"role": "user", "content": "hello"},
                              {"role": "assistant", "content": first}]
    assert model.message(1).version == 0 and model.rowCount() == 4


def test_switching_survives_reopening(make_window, wait_until):
    window = make_window(max_tokens=6)
    pane = window.panes.panes()[0]
    session = pane.session
    session.send("hello")
    wait_until(lambda: not session.busy)
    _regenerate(pane, 1, wait_until)
    _regenerate(pane, 1, wait_until)
    pane.view.message_widgets()[1].versions.previous.click()       # 2 of 3
    contents = [v["content"] for v in session.model.message(1).versions]
    conv_id = session.conversation.id
    window.close()
    again = make_window(load=False).panes.panes()[0]
    assert again.session.conversation.id == conv_id
    msg = again.session.model.message(1)
    assert (msg.version, msg.content) == (1, contents[1])
    assert again.view.message_widgets()[1].versions.label.text() == "2/3"


_OLD_MESSAGES = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, settings TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    state TEXT NOT NULL, ttft_s REAL, decode_tok_s REAL, num_tokens INTEGER,
    prompt_tokens INTEGER, model TEXT NOT NULL DEFAULT '', error TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL);
INSERT INTO conversations VALUES (4, 'Old', '{}', 1.0, 2.0);
INSERT INTO messages (conversation_id, position, role, content, state, num_tokens, created_at)
    VALUES (4, 0, 'user', 'hi', 'done', NULL, 1.5), (4, 1, 'assistant', 'hello!', 'done', 3, 1.6);
"""


def test_a_database_from_before_versions_gets_the_columns(tmp_path):
    db = sqlite3.connect(tmp_path / "tandem.sqlite3")
    db.executescript(_OLD_MESSAGES)
    db.close()
    store = Store(tmp_path)
    user, answer = store.messages(4)
    assert (user.content, answer.content, answer.num_tokens) == ("hi", "hello!", 3)
    assert answer.versions == [] and answer.version == 0
    from app.storage.message_versions import with_new_version
    answer = with_new_version(answer, "m")
    answer.content = "hey"
    store.update_message(answer)
    store.close()
    again = Store(tmp_path).messages(4)[1]
    assert again.content == "hey" and again.version == 1
    assert [v["content"] for v in again.versions] == ["hello!", "hey"]
    assert again.versions[0]["num_tokens"] == 3


def test_a_broken_versions_value_reads_as_one_answer(tmp_path):
    store = Store(tmp_path)
    conv = store.create_conversation(__import__("app.storage.conversation",
                                                fromlist=["Conversation"]).Conversation())
    msg_id = store.add_message(conv.id, 0, Message("assistant", "only"))
    store._db.execute("UPDATE messages SET versions='not json', version=5 WHERE id=?", (msg_id,))
    msg = store.messages(conv.id)[0]
    assert (msg.content, msg.versions, msg.version) == ("only", [], 0)


def test_each_version_keeps_its_own_reused_prompt_tokens(tmp_path):
    """A regenerated answer's "reused N of M" is its own; a version stored before the
    figure existed shows none rather than another version's."""
    from app.storage.message_versions import records_from_json, with_new_version, with_version
    first = Message("assistant", "one", prompt_tokens=100, cached_tokens=90)
    second = with_new_version(first, "m")
    second.cached_tokens, second.prompt_tokens = 40, 100
    assert with_version(second, 0).cached_tokens == 90
    assert with_version(second, 1).cached_tokens == 40
    old = records_from_json([{"content": "a", "state": "done"}, {"content": "b"}])
    assert with_version(second.copy(versions=old, version=1), 0).cached_tokens is None


def test_a_regenerated_version_streams_alone_with_its_own_footer(make_window, wait_until):
    """Issue 22 item 6: while the new version streams, 2/2 shows only its own text and
    a streaming footer; once done, its TTFT is its own, not the old version's."""
    window = make_window(max_tokens=6)
    pane = window.panes.panes()[0]
    session, model = pane.session, pane.session.model
    session.send("hello")
    wait_until(lambda: not session.busy)
    old = model.message(1).copy(content="OLD-ANSWER", ttft_s=42.0, decode_tok_s=7.0)
    model.replace(1, old)
    seen = []

    def on_token(request_id, _text, _n):
        if request_id == session.request_id:
            model.flush()
            widget = pane.view.message_widgets()[1]
            seen.append((model.message(1).content, widget.stats.text(),
                         widget.versions.label.text()))
    window.bridge.token_received.connect(on_token)
    pane.view.message_widgets()[1].buttons["regenerate"].click()
    assert "OLD-ANSWER" not in model.message(1).content
    assert model.message(1).is_streaming and model.message(1).ttft_s is None
    wait_until(lambda: not session.busy)
    window.bridge.token_received.disconnect(on_token)
    assert seen
    for content, stats, label in seen:
        assert "OLD-ANSWER" not in content and label == "2/2"
        assert "42.00 s" not in stats and "7.0 tok/s" not in stats
        assert "streaming…" in stats
    new = model.message(1)
    assert new.ttft_s is not None and new.ttft_s != 42.0
    assert "42.00 s" not in pane.view.message_widgets()[1].stats.text()
    assert new.versions[0]["content"] == "OLD-ANSWER" and new.versions[0]["ttft_s"] == 42.0
