"""Applies the Settings' theme (System, Light, Dark) and font size to the running app,
and follows the system's light/dark setting while the choice is System (Qt 6.5+:
QStyleHints.colorScheme and its colorSchemeChanged signal)."""
from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal

from app.style import BASE_FONT_PX, apply_theme, current_theme


class Appearance(QObject):
    """Signals:
        changed(str): the theme now shown, "light" or "dark"
    """
    changed = Signal(str)

    def __init__(self, app, parent=None):
        super().__init__(parent)
        self._app = app
        self.choice, self.font_px = "system", BASE_FONT_PX
        self._telling = False
        self._hints = app.styleHints()
        self._hints.colorSchemeChanged.connect(self._on_color_scheme_changed)

    @property
    def theme(self) -> str:
        return current_theme()

    def apply(self, choice: str, font_px: int) -> None:
        """Show `choice` ("system", "light" or "dark") at `font_px`, at once."""
        self.choice, self.font_px = choice, font_px
        self._telling = True         # our own scheme change is not the system's
        try:
            self._tell_platform(choice)
        finally:
            self._telling = False
        self._restyle()

    def system_theme(self) -> str:
        dark = self._hints.colorScheme() == Qt.ColorScheme.Dark
        return "dark" if dark else "light"

    def _tell_platform(self, choice: str) -> None:
        """Title bars and native dialogs follow an explicit choice (Qt 6.8+)."""
        if not hasattr(self._hints, "setColorScheme"):
            return
        if choice == "system":
            self._hints.unsetColorScheme()
        else:
            self._hints.setColorScheme(Qt.ColorScheme.Dark if choice == "dark"
                                       else Qt.ColorScheme.Light)

    def _restyle(self) -> None:
        theme = self.system_theme() if self.choice == "system" else self.choice
        apply_theme(self._app, theme, self.font_px)
        self.changed.emit(theme)

    # slots
    def _on_color_scheme_changed(self, _scheme) -> None:
        if self.choice == "system" and not self._telling:
            self._restyle()


def appearance_for(app) -> Appearance:
    """The app's one Appearance (it lives as long as the app, windows come and go)."""
    found = app.findChild(Appearance, "appearance")
    if found is None:
        found = Appearance(app, parent=app)
        found.setObjectName("appearance")
    return found
