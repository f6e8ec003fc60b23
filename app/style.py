"""Applies resources/tandem.qss and a readable default font."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QFont, QFontDatabase

STYLE_SHEET = Path(__file__).resolve().parent.parent / "resources" / "tandem.qss"
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
