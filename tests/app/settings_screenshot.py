"""The Settings dialog alone, in one theme (no model needed):
python tests/app/settings_screenshot.py light|dark OUT_DIR
writes OUT_DIR/screenshot-settings-THEME.png (docs/ keeps both themes). Run it under a
display (Xvfb) or offscreen. feature_screenshots.py shoots the same dialog beside a
model's chat."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from PySide6.QtWidgets import QApplication

from app.storage.app_settings import AppSettings
from app.style import apply_style
from app.windows.settings_dialog import SettingsDialog


def shoot(theme: str, out: str) -> None:
    app = QApplication(sys.argv[:1])
    apply_style(app, theme)
    cache = Path(tempfile.mkdtemp()) / "prompt-cache"
    cache.mkdir()
    settings = AppSettings(theme=theme).with_chat(max_tokens=160, temperature=0.7)
    dialog = SettingsDialog(settings, cache_dir=cache)
    dialog.show()
    app.processEvents()
    dialog.grab().save(os.path.join(out, f"screenshot-settings-{theme}.png"))
    dialog.close()


if __name__ == "__main__":
    shoot(sys.argv[1], sys.argv[2])
