"""The reading-pace floor (EngineConfig.min_stream_tok_s) in Settings: stored, shown and
validated by the dialog, and applied to the running engine without a reload."""
from __future__ import annotations

import pytest

from app.storage.app_settings import MAX_STREAM_TOK_S, AppSettings
from app.windows.settings_dialog import SettingsDialog
from engine.config import EngineConfig


def test_the_pace_round_trips_through_storage(make_window):
    window = make_window(load=False)
    saved = AppSettings(min_stream_tok_s=40.0, max_num_seqs=6)
    window.store.set_setting("settings", saved.to_dict())
    back = AppSettings.from_dict(window.store.get_setting("settings"))
    assert back == saved and back.engine_config().min_stream_tok_s == 40.0
    assert AppSettings(min_stream_tok_s=0).engine_config().min_stream_tok_s == 0     # off


def test_a_bad_stored_pace_falls_back_to_the_default_alone():
    default = EngineConfig().min_stream_tok_s
    for bad in (-1, MAX_STREAM_TOK_S + 1, float("nan"), "fast", None, True):
        s = AppSettings.from_dict({"min_stream_tok_s": bad, "max_num_seqs": 6, "theme": "dark"})
        assert s.min_stream_tok_s == default
        assert (s.max_num_seqs, s.theme) == (6, "dark")                # the rest is kept
        with pytest.raises((TypeError, ValueError)):
            AppSettings(min_stream_tok_s=bad)
    assert AppSettings.from_dict({}).min_stream_tok_s == default       # older settings


def test_the_dialog_shows_and_bounds_the_pace(qtbot):
    dialog = SettingsDialog(AppSettings(min_stream_tok_s=20.0))
    qtbot.addWidget(dialog)
    field = dialog.min_stream_tok_s
    assert field.text() == "at least 20 tokens/s" and "first token" in field.toolTip()
    field.setValue(MAX_STREAM_TOK_S + 50)                              # clamped to the range
    assert dialog.settings().min_stream_tok_s == MAX_STREAM_TOK_S
    field.setValue(-5)
    assert field.text().startswith("Off") and dialog.settings().min_stream_tok_s == 0
    field.setValue(30)
    assert dialog.settings().engine_config().min_stream_tok_s == 30


def test_a_stored_fraction_is_kept_unless_the_field_changes(qtbot):
    dialog = SettingsDialog(AppSettings(min_stream_tok_s=12.5))
    qtbot.addWidget(dialog)
    assert dialog.settings().min_stream_tok_s == 12.5
    dialog.min_stream_tok_s.setValue(25)
    assert dialog.settings().min_stream_tok_s == 25


def _accept_with(monkeypatch, **fields):
    def accept(dialog):
        for name, value in fields.items():
            getattr(dialog, name).setValue(value)
        return True
    monkeypatch.setattr(SettingsDialog, "exec", accept)


def test_a_new_pace_reaches_the_running_engine_without_a_reload(make_window, monkeypatch,
                                                                 wait_until):
    window = make_window()
    engine = window.bridge.engine
    assert engine.config.min_stream_tok_s == AppSettings().min_stream_tok_s
    _accept_with(monkeypatch, min_stream_tok_s=40)
    window.open_settings_dialog()
    wait_until(lambda: window.settings.min_stream_tok_s == 40)
    assert window.bridge.engine is engine                              # no reload
    assert engine.config.min_stream_tok_s == 40 == window.bridge.config.min_stream_tok_s
    assert AppSettings.from_dict(window.store.get_setting("settings")).min_stream_tok_s == 40


def test_a_reload_for_other_limits_loads_with_the_new_pace(make_window, monkeypatch,
                                                           wait_until):
    window = make_window()
    engine = window.bridge.engine
    _accept_with(monkeypatch, min_stream_tok_s=0, max_num_seqs=4)
    window.open_settings_dialog()
    wait_until(lambda: window.bridge.engine not in (None, engine) and not window.bridge.loading)
    assert window.bridge.engine.config.min_stream_tok_s == 0
    assert window.bridge.engine.config.max_num_seqs == 4
