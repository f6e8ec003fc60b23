"""Loads resources/tandem.qss for a theme (light or dark) and a font size, and the
app's icon. Colours come from resources/themes/<theme>.json, so one sheet serves both."""
from __future__ import annotations

import json
import re
from pathlib import Path

from PySide6.QtGui import QColor, QFont, QFontDatabase, QIcon, QPalette

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
STYLE_SHEET = RESOURCES / "tandem.qss"
THEMES = RESOURCES / "themes"
ICONS = RESOURCES / "icons"
THEME_NAMES = ("light", "dark")
BASE_FONT_PX = 13              # the sheet's sizes are written for this body size
_PREFERRED = ["Inter", "SF Pro Text", ".AppleSystemUIFont", "Helvetica Neue", "Segoe UI",
              "Cantarell", "Noto Sans", "DejaVu Sans"]
_TOKEN = re.compile(r"@([a-z][a-z0-9-]*)")
_FONT_SIZE = re.compile(r"font-size:\s*(\d+)px")
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_current = {"theme": "light"}


def theme_colors(theme: str | None = None) -> dict[str, str]:
    """The named colours of `theme` (the one applied last when None)."""
    name = theme or _current["theme"]
    if name not in THEME_NAMES:
        raise ValueError(f"unknown theme {name!r}: choose one of {', '.join(THEME_NAMES)}")
    return json.loads((THEMES / f"{name}.json").read_text())


def current_theme() -> str:
    return _current["theme"]


def theme_color(name: str) -> QColor:
    return QColor(theme_colors()[name])


def style_sheet(theme: str, font_px: int = BASE_FONT_PX) -> str:
    """tandem.qss with `theme`'s colours and every font size scaled to `font_px`."""
    colors = theme_colors(theme)

    def color(match):
        if match.group(1) not in colors:
            raise KeyError(f"tandem.qss uses @{match.group(1)}, missing from {theme}.json")
        return colors[match.group(1)]

    def size(match):
        return f"font-size: {max(8, round(int(match.group(1)) * font_px / BASE_FONT_PX))}px"
    sheet = _COMMENT.sub("", STYLE_SHEET.read_text())
    return _FONT_SIZE.sub(size, _TOKEN.sub(color, sheet))


def palette(theme: str) -> QPalette:
    """Qt's palette for the widgets the sheet does not cover (dialogs, spin boxes)."""
    c = {k: QColor(v) for k, v in theme_colors(theme).items() if v.startswith("#")}
    pal = QPalette()
    role = QPalette.ColorRole
    for r, key in ((role.Window, "window"), (role.WindowText, "text"), (role.Base, "input"),
                   (role.AlternateBase, "chart-bg"), (role.Text, "text"),
                   (role.Button, "button"), (role.ButtonText, "text"),
                   (role.Highlight, "accent"), (role.HighlightedText, "accent-text"),
                   (role.ToolTipBase, "input"), (role.ToolTipText, "text"),
                   (role.PlaceholderText, "subtle"), (role.Link, "link"),
                   (role.Mid, "border"), (role.Midlight, "hover")):
        pal.setColor(r, c[key])
    for r in (role.WindowText, role.Text, role.ButtonText):
        pal.setColor(QPalette.ColorGroup.Disabled, r, c["disabled"])
    return pal


def apply_theme(app, theme: str, font_px: int = BASE_FONT_PX) -> None:
    """Restyle the running app: widgets repolish, and CodeBlock/AutoHeightBrowser
    re-render on the StyleChange that setStyleSheet sends them."""
    sheet = style_sheet(theme, font_px)
    _current["theme"] = theme
    app.setPalette(palette(theme))
    font = app.font()
    font.setPixelSize(font_px)
    app.setFont(font)
    app.setStyleSheet(sheet)


def apply_style(app, theme: str = "light", font_px: int = BASE_FONT_PX) -> None:
    app.setStyle("Fusion")
    families = set(QFontDatabase.families())
    family = next((f for f in _PREFERRED if f in families), None)
    if family:
        app.setFont(QFont(family, 10))
    apply_theme(app, theme, font_px)
    icon = QIcon()
    for name in ("tandem-256.png", "tandem.png"):
        if (ICONS / name).is_file():
            icon.addFile(str(ICONS / name))
    if not icon.isNull():
        app.setWindowIcon(icon)     # title bars and taskbars; the .app uses tandem.icns
