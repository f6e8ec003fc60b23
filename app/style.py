"""Applies resources/tandem.qss and a readable default font."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QFont, QFontDatabase, QIcon

STYLE_SHEET = Path(__file__).resolve().parent.parent / "resources" / "tandem.qss"
ICONS = STYLE_SHEET.parent / "icons"
_PREFERRED = ["Inter", "SF Pro Text", ".AppleSystemUIFont", "Helvetica Neue", "Segoe UI",
              "Cantarell", "Noto Sans", "DejaVu Sans"]


def apply_style(app) -> None:
    app.setStyle("Fusion")
    families = set(QFontDatabase.families())
    family = next((f for f in _PREFERRED if f in families), None)
    if family:
        app.setFont(QFont(family, 10))
    if STYLE_SHEET.is_file():
        app.setStyleSheet(STYLE_SHEET.read_text())
    icon = QIcon()
    for name in ("tandem-256.png", "tandem.png"):
        if (ICONS / name).is_file():
            icon.addFile(str(ICONS / name))
    if not icon.isNull():
        app.setWindowIcon(icon)     # title bars and taskbars; the .app uses tandem.icns
