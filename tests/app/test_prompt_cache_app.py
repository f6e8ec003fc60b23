"""The prompt cache on disk as the app shows it: Settings (budget, use, Clear), the
reused-prefix figure after a restart, and the stored figure."""
from __future__ import annotations

import pytest
from conftest import REAL_ENGINE

from app.chat.message_widget import stats_text
from app.storage.app_settings import AppSettings
from app.storage.message import Message
from app.windows.settings_dialog import SettingsDialog


def test_stats_show_how_much_of_the_prompt_was_reused():
    msg = Message("assistant", "hi", ttft_s=0.2, num_tokens=5, prompt_tokens=1060,
                  cached_tokens=1024)
    assert "reused 1,024 of 1,060 prompt tokens" in stats_text(msg)
    assert "reused" not in stats_text(msg.copy(cached_tokens=0))


def test_settings_show_the_budget_the_use_and_clear_it(qtbot, tmp_path):
    folder = tmp_path / "prompt-cache"
    folder.mkdir()
    (folder / "v1-0123456789abcdef-00.safetensors").write_bytes(b"x" * (3 << 20))
    dialog = SettingsDialog(AppSettings(disk_cache_mb=1024), cache_dir=folder)
    qtbot.addWidget(dialog)
    assert dialog.disk_cache_mb.value() == 1024
    assert "3.0 MB used" in dialog.disk_usage.text() and dialog.clear_button.isEnabled()
    dialog.clear_button.click()
    assert not list(folder.iterdir())
    assert "0.0 MB used" in dialog.disk_usage.text() and not dialog.clear_button.isEnabled()
    dialog.disk_cache_mb.setValue(0)                      # shown as "Off"
    out = dialog.settings()
    assert out.disk_cache_mb == 0 and dialog.disk_cache_mb.text().startswith("Off")
    assert out.engine_config(str(folder)).cache_dir is None
    on = AppSettings(disk_cache_mb=512).engine_config(str(folder))
    assert on.cache_dir == str(folder) and on.disk_cache_mb == 512


@pytest.mark.skipif(not REAL_ENGINE, reason="needs the real engine")
def test_a_conversation_reopened_after_a_restart_reuses_its_history(make_window, wait_until,
                                                                    data_dir):
    window = make_window(max_tokens=6)
    session = window.panes.panes()[0].session
    assert session.send("Tell me about the weather in a few words, please, and more. " * 6)
    wait_until(lambda: not session.busy)
    conv_id = session.conversation.id
    window.close()
    window.bridge.close()             # the engine writes its kept turns on close
    window.store.close()
    assert list((data_dir / "prompt-cache").iterdir())
    again = make_window(max_tokens=6)                     # a restart: a new engine
    again.open_conversation(conv_id)
    reopened = next(p.session for p in again.panes.panes()
                    if p.session.conversation.id == conv_id)
    assert reopened.send("And tomorrow?")
    wait_until(lambda: not reopened.busy)
    reply = reopened.model.message(reopened.model.last_row())
    assert reply.cached_tokens and reply.cached_tokens > 40
    assert f"reused {reply.cached_tokens:,} of {reply.prompt_tokens:,}" in stats_text(reply)
    stored = again.store.messages(conv_id)[-1]
    assert stored.cached_tokens == reply.cached_tokens
