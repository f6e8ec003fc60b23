"""The "⋯" menu in a pane's header: conversation settings, export, close."""
from __future__ import annotations

from PySide6.QtWidgets import QMenu, QToolButton


def pane_menu_button(pane) -> QToolButton:
    """A header button whose menu drives `pane`'s signals (ChatPane)."""
    button = QToolButton(text="⋯", objectName="paneButton", toolTip="More")
    button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
    menu = QMenu(button)
    menu.addAction("Conversation settings…", pane.settings_requested.emit)
    menu.addSeparator()
    menu.addAction("Export as Markdown…", lambda: pane.export_requested.emit("markdown"))
    menu.addAction("Export as JSON…", lambda: pane.export_requested.emit("json"))
    menu.addSeparator()
    menu.addAction("Close pane", pane.close_requested.emit)
    button.setMenu(menu)
    return button
