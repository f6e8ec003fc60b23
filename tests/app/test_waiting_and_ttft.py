"""The app shows the truth about a reply that waits behind another prompt: its
conversation reads "waiting" while its prompt is queued, and its time to first token
counts from the send and does not change once the reply is done."""
from __future__ import annotations

import time

from PySide6.QtCore import QObject, Signal

from app.controllers.bridge import EngineBridge
from app.controllers.chat_session import ChatSession
from app.status.activity import DEGRADED_NOTE, READING, Activity
from app.status.status_panel import StatusPanel
from app.storage.conversation import Conversation
from app.storage.store import Store
from engine.events import RequestStats, StepEvent


class ScriptedBridge(QObject):
    """The bridge's signals and verbs; the test plays the engine's part."""
    request_submitted = Signal(int, int)
    token_received = Signal(int, str, int)
    request_finished = Signal(int, str, object, str, str)
    load_progress = Signal(float, str)
    model_loaded = Signal(str)
    load_failed = Signal(str)
    model_name = "scripted"
    engine, loading = None, False   # not loading: sends are submitted at once

    def __init__(self):
        super().__init__()
        self.submitted = []

    def submit(self, prompt, params) -> int:
        self.submitted.append(prompt)
        return len(self.submitted)

    def cancel(self, request_id):
        pass


def _step(n, **kw):
    now = time.perf_counter()
    return StepEvent(n, now, now, kw.pop("kind", "decode"), **kw)


def test_a_queued_prompt_reads_waiting_then_reading_then_its_rate(qtbot):
    bridge = EngineBridge()
    # both sent, no token here yet: the app alone cannot tell queued from reading
    active = [Activity(rid, f"Chat {rid}", READING) for rid in (1, 2)]
    panel = StatusPanel(bridge, activity=lambda: active)
    qtbot.addWidget(panel)
    # 2 was sent while 1 streams; no step has mentioned it yet: it is queued
    bridge.step.emit(_step(1, decode_request_ids=(1,), batch_size=1))
    qtbot.waitUntil(lambda: panel.per_conversation.text().splitlines()[0].endswith("tok/s"))
    assert panel.per_conversation.text().splitlines()[1] == "Chat 2  waiting"
    bridge.step.emit(_step(2, decode_request_ids=(1,), batch_size=1, waiting_request_ids=(2,)))
    qtbot.wait(300)
    assert "Chat 2  waiting" in panel.per_conversation.text()
    bridge.step.emit(_step(3, kind="mixed", decode_request_ids=(1,), batch_size=1,
                           prefill_request_ids=(2,), prefill_tokens=64))
    qtbot.waitUntil(lambda: "Chat 2  reading prompt" in panel.per_conversation.text())
    bridge.step.emit(_step(4, decode_request_ids=(1, 2), batch_size=2))
    qtbot.waitUntil(lambda: all(line.endswith("tok/s") for line in
                                panel.per_conversation.text().splitlines()))


def test_the_degraded_prompt_reading_is_said(qtbot):
    bridge = EngineBridge()
    panel = StatusPanel(bridge, activity=lambda: [Activity(rid, f"Chat {rid}", READING)
                                                  for rid in (1, 2)])
    qtbot.addWidget(panel)
    bridge.step.emit(_step(1, kind="mixed", decode_request_ids=(1,), batch_size=1,
                           prefill_request_ids=(2,), prefill_tokens=16, degraded=True))
    qtbot.waitUntil(lambda: DEGRADED_NOTE in panel.per_conversation.text())


def test_time_to_first_token_counts_from_the_send_and_stays(qtbot, data_dir):
    store = Store(data_dir)
    conv = store.create_conversation(Conversation(settings={}))
    bridge = ScriptedBridge()
    session = ChatSession(conv, store, bridge)
    t_before = time.perf_counter()
    assert session.send("hello")
    time.sleep(0.2)                         # the prompt waits behind another pane's
    bridge.token_received.emit(session.request_id, "Hi", 1)
    waited = time.perf_counter() - t_before
    reply = session.model.message(session.model.rowCount() - 1)
    shown = reply.ttft_s
    assert 0.2 <= shown <= waited           # from the send, not from some later moment
    # the engine's own figure differs by its delivery to this thread; it must not
    # replace the figure the user already saw
    stats = RequestStats(prompt_tokens=5, generated_tokens=3, ttft_s=shown - 0.05,
                         decode_tok_s=10.0)
    bridge.request_finished.emit(session.request_id, "stop", stats, "Hi there", "")
    reply = session.model.message(session.model.rowCount() - 1)
    assert reply.ttft_s == shown and reply.decode_tok_s == 10.0
    assert store.messages(conv.id)[-1].ttft_s == shown
    session.close()
    store.close()


def test_a_reply_without_a_streamed_token_takes_the_engine_figure(qtbot, data_dir):
    store = Store(data_dir)
    session = ChatSession(store.create_conversation(Conversation(settings={})), store,
                          ScriptedBridge())
    session.send("hello")
    rid = session.request_id
    stats = RequestStats(prompt_tokens=5, generated_tokens=0, ttft_s=1.5, decode_tok_s=0.0)
    session._bridge.request_finished.emit(rid, "stop", stats, "", "")
    assert session.model.message(session.model.rowCount() - 1).ttft_s == 1.5
    session.close()
    store.close()
