"""Issue 22 item 14: quitting is unconditional. `python -m app` returns 0 and frees
its data folder whether the window is closed, Qt is told to quit from outside the
window (the macOS app menu, a logout), or the model is still loading."""
from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.__main__ import main
from app.windows.main_window import MainWindow


@pytest.fixture
def qt_app(qapp):
    yield qapp
    qapp.setQuitOnLastWindowClosed(True)


def _when_window(predicate, action):
    """Poll the app's windows from Qt's loop; run action(window) once predicate holds."""
    def poll():
        windows = [w for w in QApplication.topLevelWidgets()
                   if isinstance(w, MainWindow) and w.isVisible()]
        if windows and predicate(windows[0]):
            action(windows[0])
        else:
            QTimer.singleShot(20, poll)
    QTimer.singleShot(0, poll)


def _reopens(data_dir):
    """The data folder is free again (the instance lock and the database closed)."""
    from app.storage.store_opening import open_store
    open_store(data_dir).close()
    return True


def test_closing_the_window_quits(qt_app, model_path, data_dir):
    _when_window(lambda w: w.bridge.engine is not None, lambda w: w.close())
    assert main(["--model", model_path, "--data-dir", str(data_dir)]) == 0
    assert _reopens(data_dir)


def test_quit_from_outside_the_window_quits(qt_app, model_path, data_dir):
    closed = []
    _when_window(lambda w: w.bridge.engine is not None,
                 lambda w: (closed.append(w), qt_app.quit()))
    assert main(["--model", model_path, "--data-dir", str(data_dir)]) == 0
    assert closed and closed[0].bridge.engine is None       # the engine was closed
    assert _reopens(data_dir)


def test_quitting_while_the_model_loads(qt_app, model_path, data_dir, monkeypatch):
    from app.controllers import bridge as bridge_module
    started, gate = threading.Event(), threading.Event()
    real = bridge_module.default_loader

    def slow_loader(model=None, config=None, on_progress=None):
        started.set()
        gate.wait(30)
        return real(model=model, config=config, on_progress=on_progress)

    class SlowBridge(bridge_module.EngineBridge):
        def __init__(self, *a, **k):
            super().__init__(slow_loader, *a, **k)
    monkeypatch.setattr(bridge_module, "EngineBridge", SlowBridge)

    def close(window):
        window.close()
        gate.set()             # the load finishes after the window is gone
    _when_window(lambda w: started.is_set(), close)
    assert main(["--model", model_path, "--data-dir", str(data_dir)]) == 0
    assert _reopens(data_dir)
