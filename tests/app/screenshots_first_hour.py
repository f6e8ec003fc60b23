"""Renders the states issue 13 changed and saves PNGs into a folder, on the
default model: python tests/app/screenshots_first_hour.py OUT_DIR
(run under Xvfb, e.g. DISPLAY=:99, or offscreen)."""
from __future__ import annotations

import asyncio
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from PySide6.QtCore import Qt

from app.controllers.bridge import EngineBridge
from app.status.telemetry_adapter import make_telemetry
from app.storage.store import Store
from app.windows.main_window import MainWindow
from app.windows.model_picker import ModelPicker

PROMPT = "Three short lines, please:\n- one about rivers\n- one about hills\n- one about the sea"


async def _idle(pane) -> None:
    while pane.session.busy:
        await asyncio.sleep(0.1)


async def shoot(out: str) -> None:
    store = Store(tempfile.mkdtemp())
    bridge = EngineBridge()
    telemetry = make_telemetry()
    window = MainWindow(store, bridge, telemetry=telemetry)
    window.resize(1800, 960)
    window.show()
    window.resizeDocks([window.status_panel], [280], Qt.Orientation.Horizontal)
    await asyncio.sleep(0.3)
    pane = window.panes.panes()[0]
    # The first send while the model loads: the reply shows the load's progress.
    loading = asyncio.ensure_future(window.load_model(None))
    while not bridge.loading:
        await asyncio.sleep(0.01)
    pane.session.send(PROMPT)
    for _ in range(100):                       # until the loader says what it reads
        if bridge.last_progress[1]:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    window.grab().save(os.path.join(out, "screenshot-loading-first-send.png"))
    await loading
    await _idle(pane)
    other = window.new_conversation(True)      # a second open chat, then closed
    other.session.send("Hello!")
    await _idle(other)
    window.close_pane(other)
    window.new_conversation(True).session.send("Name a colour.")
    await asyncio.sleep(0.2)
    window.close_pane(window.panes.active)
    pane = window.panes.panes()[0]
    window.panes.set_active(pane)
    pane.session.send("Now write a long poem about the sea, in six stanzas.")
    while (pane.session.model.message(pane.session.model.last_row()).num_tokens or 0) < 40:
        await asyncio.sleep(0.1)
    window.grab().save(os.path.join(out, "screenshot-wide-pane.png"))
    pane.session.stop()
    await _idle(pane)
    widget = pane.view.message_widgets()[0]
    widget.start_edit()
    await asyncio.sleep(0.3)
    pane.view.ensureWidgetVisible(widget)
    await asyncio.sleep(0.2)
    pane.grab().save(os.path.join(out, "screenshot-edit-box.png"))
    widget.cancel_edit()
    picker = ModelPicker(store.get_setting("recent_models", []), window)
    picker.show()
    await asyncio.sleep(0.3)
    picker.grab().save(os.path.join(out, "screenshot-model-picker.png"))
    picker.close()
    window.close()
    if telemetry is not None:
        telemetry.stop()


if __name__ == "__main__":
    from screenshots import run_in_app
    run_in_app(shoot(sys.argv[1]))
