"""The app's plain-data parts: store, think splitting, Markdown segments,
step statistics, model discovery, settings."""
from __future__ import annotations

import json

from app.chat.markdown_segments import split_markdown
from app.chat.think_text import split_think, strip_think
from app.controllers.model_discovery import find_models
from app.status.step_stats import StepStats
from app.storage.app_settings import AppSettings
from app.storage.conversation import Conversation
from app.storage.message import Message, MessageState
from app.storage.store import Store
from engine.events import StepEvent


def test_store_roundtrip_search_and_order(tmp_path):
    store = Store(tmp_path)
    a = store.create_conversation(Conversation(title="Rust lifetimes", updated_at=1.0))
    b = store.create_conversation(Conversation(title="Pasta", updated_at=2.0))
    store.add_message(a.id, 0, Message("user", "what is a borrow checker?"))
    assert [c.id for c in store.conversations()] == [a.id, b.id]      # newest first
    assert [c.id for c in store.conversations("pasta")] == [b.id]      # by title
    assert [c.id for c in store.conversations("borrow")] == [a.id]     # by text
    store.delete_conversation(a.id)
    assert store.messages(a.id) == [] and [c.id for c in store.conversations()] == [b.id]


def test_streaming_message_is_marked_interrupted_on_reopen(tmp_path):
    store = Store(tmp_path)
    conv = store.create_conversation(Conversation())
    store.add_message(conv.id, 0, Message("assistant", "half an ans", MessageState.STREAMING))
    store.close()
    reopened = Store(tmp_path)
    assert reopened.num_interrupted == 1
    [msg] = reopened.messages(conv.id)
    assert msg.state == MessageState.INTERRUPTED and msg.content == "half an ans"


def test_settings_roundtrip(tmp_path):
    store = Store(tmp_path)
    store.set_setting("settings", AppSettings(max_num_seqs=3).to_dict())
    assert AppSettings.from_dict(store.get_setting("settings")).max_num_seqs == 3
    assert AppSettings.from_dict({"temperature": -1}) == AppSettings()   # invalid -> defaults
    assert AppSettings.from_dict({"max_num_seqs": 0, "chat": {"top_k": 5}}) == \
        AppSettings().with_chat(top_k=5)                                  # bad limit only


def test_app_settings_defaults_come_from_the_engine_config():
    from engine.config import EngineConfig
    assert AppSettings().engine_config() == EngineConfig()


def test_old_flat_settings_are_read(tmp_path):
    """Before the spec: chat defaults at the top level and a page count."""
    old = {"max_num_seqs": 4, "num_pages": 2048, "prefill_chunk": 256, "system_prompt": "Hi.",
           "temperature": 0.2, "top_p": 0.9, "max_tokens": 300}
    s = AppSettings.from_dict(old)
    assert (s.max_num_seqs, s.prefill_chunk, s.kv_budget_mb) == (4, 256, None)
    assert s.chat["temperature"] == 0.2 and s.chat["max_tokens"] == 300
    assert s.chat["system_prompt"] == "Hi." and s.chat["top_k"] == 0


def test_split_think():
    done = split_think("<think>plan it</think>The answer.")
    assert (done.reasoning, done.answer, done.thinking) == ("plan it", "The answer.", False)
    streaming = split_think("<think>still pla")
    assert streaming.thinking and streaming.answer == "" and streaming.reasoning == "still pla"
    implicit = split_think("reasoning only closed</think>answer")
    assert (implicit.reasoning, implicit.answer) == ("reasoning only closed", "answer")
    assert strip_think("plain") == "plain"


def test_markdown_segments_code_blocks():
    segs = split_markdown("Intro\n\n```python\nprint(1)\n```\n\n- a\n- b\n\n```\nopen")
    assert [(s.kind, s.language, s.closed) for s in segs] == [
        ("text", "", True), ("code", "python", True), ("text", "", True), ("code", "", False)]
    assert segs[1].text == "print(1)" and segs[3].text == "open"


def test_step_stats_rates_and_batch():
    stats = StepStats(window_s=1.0)
    for i in range(10):   # 10 steps of batch 2 over 1 s, one prefill of 100 tokens
        stats.add_step(StepEvent(i, i * 0.1, i * 0.1 + 0.1, "decode", (1, 2),
                                 prefill_tokens=100 if i == 5 else 0, batch_size=2,
                                 kv_pages_used=7, kv_pages_total=99))
    snap = stats.snapshot(now=1.0)
    assert abs(snap.decode_tok_s - 20) < 1e-6 and abs(snap.prefill_tok_s - 100) < 1e-6
    assert snap.per_request_tok_s == {1: 10.0, 2: 10.0}
    assert (snap.batch_size, snap.max_batch_size, snap.kv_pages_used) == (2, 2, 7)
    assert stats.snapshot(now=10.0).decode_tok_s == 0           # idle decays to 0


def test_prefill_only_step_keeps_the_last_decode_batch():
    stats = StepStats(window_s=1.0)
    stats.add_step(StepEvent(1, 0.0, 0.1, "decode", (1, 2, 3), batch_size=3))
    stats.add_step(StepEvent(2, 0.1, 0.3, "prefill", (), prefill_request_ids=(4,),
                             prefill_tokens=512, batch_size=0))
    snap = stats.snapshot(now=0.3)
    assert (snap.batch_size, snap.last_decode_batch) == (3, 3)
    later = stats.snapshot(now=5.0)                       # nothing decoded for a while
    assert (later.batch_size, later.last_decode_batch) == (0, 3)


def test_find_models_in_hf_cache_and_lmstudio(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snap = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({}))
    (snap / "model.safetensors").write_bytes(b"")
    lms = tmp_path / ".lmstudio" / "models" / "pub" / "repo"
    lms.mkdir(parents=True)
    (lms / "m-Q4.gguf").write_bytes(b"")
    found = {(m.name, m.source) for m in find_models()}
    assert ("org/tiny", "Hugging Face cache") in found
    assert ("m-Q4.gguf", "LM Studio") in found
