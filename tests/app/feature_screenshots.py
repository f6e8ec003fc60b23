"""Screenshots of the features of issue 13 (15-19) in one theme, on the default
model: a chat with a highlighted code block and a regenerated answer ("‹ 2/2 ›"),
Help > About, and Settings (Appearance):
python tests/app/feature_screenshots.py light|dark OUT_DIR [MODEL]
Run it under a display (Xvfb) or offscreen."""
from __future__ import annotations

import asyncio
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))


from app.controllers.bridge import EngineBridge
from app.storage.app_settings import AppSettings
from app.storage.store import Store
from app.windows.main_window import MainWindow
from app.windows.settings_dialog import SettingsDialog

PROMPT = "Write a Python function that reverses a string, in a code block."


async def _wait_idle(session) -> None:
    while session.busy:
        await asyncio.sleep(0.1)


async def shoot(theme: str, out: str, model: str | None) -> None:
    store = Store(tempfile.mkdtemp())
    store.set_setting("settings", AppSettings(theme=theme).with_chat(
        max_tokens=160, temperature=0.7).to_dict())
    bridge = EngineBridge()
    window = MainWindow(store, bridge)
    window.resize(1280, 860)
    window.show()
    window.status_panel.hide()
    assert await window.load_model(model), window.last_error
    pane = window.panes.panes()[0]
    pane.session.send(PROMPT)
    await _wait_idle(pane.session)
    pane.session.regenerate(1)
    await _wait_idle(pane.session)
    await asyncio.sleep(0.5)
    window.grab().save(os.path.join(out, f"screenshot-chat-{theme}.png"))
    about = window.show_about()
    await asyncio.sleep(0.5)
    about.grab().save(os.path.join(out, f"screenshot-about-{theme}.png"))
    about.close()
    settings = SettingsDialog(window.settings, window)
    settings.show()
    await asyncio.sleep(0.5)
    settings.grab().save(os.path.join(out, f"screenshot-settings-{theme}.png"))
    settings.close()
    window.close()
    bridge.close()


if __name__ == "__main__":
    from screenshots import run_in_app
    run_in_app(shoot(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
