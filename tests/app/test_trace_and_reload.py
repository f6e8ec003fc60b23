"""Trace recording from the status panel, and model reloads that never hold two
models at once and fall back to the previous model when the new one fails."""
from __future__ import annotations

import json
import threading

from fixed_sampler import fixed_monitor
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFileDialog

from app.storage.message import MessageState
from engine.telemetry import validate_trace
from engine.telemetry.trace_format import GPU_MHZ


def _reply(session):
    return session.model.message(session.model.last_row())


def test_record_toggle_follows_a_reload_and_saves_as_json(make_window, wait_until, run,
                                                          model_path, tmp_path, monkeypatch):
    monitor = fixed_monitor()
    window = make_window(max_tokens=8, telemetry=monitor)
    panel = window.status_panel
    assert not panel.save_trace_button.isEnabled()          # nothing recorded yet
    panel.trace_button.click()
    assert window.trace.is_recording and panel.save_trace_button.isEnabled()
    assert run(window.load_model(model_path))                # the recorder follows the new engine
    monitor.sample_once()
    session = window.panes.panes()[0].session
    assert session.send("Record this, please")
    wait_until(lambda: not session.busy)
    panel.trace_button.click()
    assert not window.trace.is_recording and not panel.trace_button.isChecked()
    asked = []

    def choose(*args, **kwargs):
        asked.append(args)
        return str(tmp_path / "exported"), "Chrome / Perfetto trace (*.json)"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", choose)
    panel.save_trace_button.click()
    assert asked
    trace = json.loads((tmp_path / "exported.json").read_text())
    assert validate_trace(trace) == []
    names = [e["name"] for e in trace["traceEvents"]]
    assert "decode_step" in names and GPU_MHZ in names
    assert "exported.json" in window.statusBar().currentMessage()


def test_save_as_while_recording_exports_the_recording_so_far(make_window, wait_until,
                                                               tmp_path, monkeypatch):
    window = make_window(max_tokens=4)
    window.status_panel.trace_button.click()
    session = window.panes.panes()[0].session
    session.send("hi")
    wait_until(lambda: not session.busy)
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *a, **k: (str(tmp_path / "now.json"), ""))
    window.save_trace_as()
    trace = json.loads((tmp_path / "now.json").read_text())
    assert validate_trace(trace) == [] and trace["otherData"]["recording_in_progress"]
    assert window.trace.is_recording


def test_trace_path_records_from_the_start_to_close(make_window, qapp, data_dir, loader,
                                                    model_path, run, wait_until, tmp_path):
    from app.controllers.bridge import EngineBridge
    from app.storage.store import Store
    from app.windows.main_window import MainWindow
    target = tmp_path / "cli-trace.json"
    store, bridge = Store(data_dir), EngineBridge(loader)
    window = MainWindow(store, bridge, trace_path=str(target))
    window.status_panel.trace_button.setChecked(True)        # what `--trace PATH` does
    window.show()
    assert run(window.load_model(model_path))
    session = window.panes.panes()[0].session
    session.send("hello")
    wait_until(lambda: not session.busy)
    window.close()
    bridge.close()
    store.close()
    trace = json.loads(target.read_text())
    assert validate_trace(trace) == [] and not trace["otherData"]["recording_in_progress"]
    assert "decode_step" in [e["name"] for e in trace["traceEvents"]]


def test_failed_load_closes_first_then_brings_back_the_previous_model(make_window, wait_until,
                                                                      run, tmp_path, model_path):
    seen = []        # (the bridge's engine when a load began, the model asked for)
    gui_ran = threading.Event()
    bridges = []

    def wrap(loader):
        def load(model=None, config=None, on_progress=None):
            seen.append((bridges[0].engine if bridges else None, model))
            if len(seen) > 1:
                assert gui_ran.wait(30), "the event loop was blocked during the load"
            return loader(model=model, config=config, on_progress=on_progress)
        return load
    window = make_window(max_tokens=400, wrap_loader=wrap, load=False)
    bridges.append(window.bridge)
    assert run(window.load_model(model_path))
    name, path, config = window.bridge.model_name, window.bridge.model_path, window.bridge.config
    old_engine = window.bridge.engine
    session = window.panes.panes()[0].session
    session.send("a long answer, please")
    wait_until(lambda: (_reply(session).num_tokens or 0) >= 2)
    progress_shown = []
    window.bridge.load_progress.connect(lambda *_: progress_shown.append(
        window.progress.isVisible()))
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")     # found only by the load itself
    (broken / "model.safetensors").write_bytes(b"")
    QTimer.singleShot(0, gui_ran.set)
    assert not run(window.load_model(str(broken)))
    assert seen[1] == (None, str(broken))                   # the old engine was gone first
    assert old_engine is not window.bridge.engine
    assert seen[2][1] == path and window.bridge.config == config
    assert _reply(session).state == MessageState.STOPPED and not session.busy
    assert window.error_box is not None and window.error_box.isVisible()
    assert window.last_error
    assert progress_shown and all(progress_shown)
    assert window.bridge.model_name == name and not window.progress.isVisible()
    assert session.send("still there?")
    wait_until(lambda: not session.busy)
    assert _reply(session).state in (MessageState.DONE, MessageState.LENGTH)
    assert _reply(session).num_tokens
