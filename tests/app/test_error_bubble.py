"""Issue 17 item 5 in the app: when the engine fails a request, its bubble says why
(the engine's message), keeps the text so far, and the other pane streams on."""
from __future__ import annotations

from app.storage.message import MessageState
from engine.core.runner import Runner


def test_a_failed_request_shows_the_reason_and_spares_the_other_pane(
        make_window, wait_until, monkeypatch, endless_model_path):
    # a streams without an end-of-text, so it is still decoding when b's prompt is read:
    # that step is a mixed one (a's row and b's chunk), or a prefill once a is recomputed.
    window = make_window(max_tokens=60, model=endless_model_path)
    a = window.panes.panes()[0]
    b = window.new_conversation(True)
    a.session.send("keep going")
    wait_until(lambda: (a.session.model.message(1).num_tokens or 0) >= 2)
    prefill, mixed, streaming = Runner.prefill, Runner.mixed, a.session.request_id

    def failing(chunks):
        # Fails any prompt but a's (a is recomputed after the failed step: it was in it).
        if any(c.seq.request_id != streaming for c in chunks):
            raise RuntimeError("the device ran out of memory")

    def broken_prefill(self, chunks):
        failing(chunks)
        return prefill(self, chunks)

    def broken_mixed(self, seqs, chunks):
        failing(chunks)
        return mixed(self, seqs, chunks)
    monkeypatch.setattr(Runner, "prefill", broken_prefill)
    monkeypatch.setattr(Runner, "mixed", broken_mixed)
    b.session.send("this one fails")
    wait_until(lambda: not b.session.busy)
    monkeypatch.setattr(Runner, "prefill", prefill)
    monkeypatch.setattr(Runner, "mixed", mixed)
    reply = b.session.model.message(1)
    assert reply.state == MessageState.ERROR
    assert "RuntimeError: the device ran out of memory" in reply.error
    stats = b.view.message_widgets()[-1].stats.text()
    assert "error: " in stats and "ran out of memory" in stats
    wait_until(lambda: not a.session.busy)
    first = a.session.model.message(1)
    assert first.state in (MessageState.DONE, MessageState.LENGTH) and first.num_tokens > 2
    stored = window.store.messages(b.session.conversation.id)[-1]
    assert stored.state == MessageState.ERROR and stored.error == reply.error
