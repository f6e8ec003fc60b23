"""Renders the window offscreen with N panes streaming on the default model,
telemetry wired in and the status panel open, and saves a PNG:
python tests/app/screenshots.py N OUT.png [MODEL]"""
from __future__ import annotations

import asyncio
import os
import sys
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import qasync
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.controllers.bridge import EngineBridge
from app.status.telemetry_adapter import make_telemetry
from app.storage.store import Store
from app.style import apply_style
from app.windows.main_window import MainWindow

PROMPTS = ["Write a short poem, in four stanzas, about two rivers meeting.",
           "Give me three tips for writing clean Python, as a list.",
           "Show a Python function that reverses a string, in a code block.",
           "What is the capital of France? Answer in one sentence."]


def _tokens(pane) -> int:
    model = pane.session.model
    return model.message(model.last_row()).num_tokens or 0


async def shoot(num_panes: int, out: str, model: str | None) -> None:
    store = Store(tempfile.mkdtemp())
    bridge = EngineBridge()
    telemetry = make_telemetry()
    window = MainWindow(store, bridge, telemetry=telemetry)
    window.resize(1600 if num_panes <= 2 else 1920, 960)
    window.show()
    window.status_panel.show()
    window.resizeDocks([window.status_panel], [270], Qt.Orientation.Horizontal)
    assert await window.load_model(model), window.last_error
    old = window.new_conversation(True)             # a finished chat in the sidebar
    old.session.send("Hi! Who are you?")
    while old.session.busy:
        await asyncio.sleep(0.1)
    window.close_pane(old)
    for pane in window.panes.panes():               # the empty first chat
        window.delete_conversation(pane.session.conversation.id)
    panes = [window.new_conversation(True) for _ in range(num_panes)]
    window.status_panel.trace_button.setChecked(True)      # show a recording in progress
    for pane, prompt in zip(panes, PROMPTS):
        pane.session.send(prompt)
    # Grab once every pane has streamed a few lines (or after a minute).
    for _ in range(600):
        if all(_tokens(p) >= 24 or not p.session.busy for p in panes):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    window.grab().save(out)
    for pane in panes:
        pane.session.stop()
    await asyncio.sleep(0.5)
    window.close()
    bridge.close()
    if telemetry is not None:
        telemetry.stop()


def run_in_app(coroutine) -> None:
    """Run a screenshot coroutine inside a styled QApplication on a qasync loop (the
    screenshot scripts beside this one share it)."""
    app = QApplication(sys.argv[:1])
    apply_style(app)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        loop.run_until_complete(coroutine)


if __name__ == "__main__":
    run_in_app(shoot(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
