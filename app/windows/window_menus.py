"""The main window's menus and shortcuts."""
from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence


def _action(window, menu, text, slot, shortcut=None) -> QAction:
    action = QAction(text, window)
    if shortcut:
        action.setShortcut(QKeySequence(shortcut))
    action.triggered.connect(slot)
    menu.addAction(action)
    return action


def build_menus(window) -> None:
    bar = window.menuBar()
    file = bar.addMenu("&File")
    _action(window, file, "New chat", lambda: window.new_conversation(False), "Ctrl+N")
    _action(window, file, "New chat in new pane", lambda: window.new_conversation(True),
            "Ctrl+T")
    _action(window, file, "Close pane",
            lambda: window.panes.active and window.close_pane(window.panes.active), "Ctrl+W")
    _action(window, file, "Stop all replies", window.sessions.stop_all, "Ctrl+Shift+.")
    file.addSeparator()
    _action(window, file, "Export chat as Markdown…",
            lambda: window.export_chat(window.panes.active, "markdown"), "Ctrl+Shift+E")
    _action(window, file, "Export chat as JSON…",
            lambda: window.export_chat(window.panes.active, "json"))
    file.addSeparator()
    _action(window, file, "Save trace as…", window.save_trace_as, "Ctrl+Shift+S")
    file.addSeparator()
    settings = _action(window, file, "Settings…", window.open_settings_dialog)
    # The platform's own (Cmd+, on macOS) and Ctrl+, where the platform has none.
    keys = list(QKeySequence.keyBindings(QKeySequence.Preferences))
    if QKeySequence("Ctrl+,") not in keys:
        keys.append(QKeySequence("Ctrl+,"))
    settings.setShortcuts(keys)
    file.addSeparator()
    _action(window, file, "Quit", window.close, QKeySequence.Quit)
    model = bar.addMenu("&Model")
    _action(window, model, "Open model…", window.open_model_dialog, "Ctrl+O")
    view = bar.addMenu("&View")
    view.addAction(window.status_panel.toggleViewAction())
    help_menu = bar.addMenu("&Help")
    _action(window, help_menu, "Keyboard shortcuts", window.show_shortcuts, "Ctrl+/")
    about = _action(window, help_menu, "About Tandem", window.show_about)
    about.setMenuRole(QAction.MenuRole.AboutRole)      # macOS: the app menu
