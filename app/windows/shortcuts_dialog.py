"""Help > Keyboard shortcuts: every menu action's keys, read from the menus themselves
(so the list cannot go stale), then the keys that work inside a pane."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTableWidget, QTableWidgetItem, QVBoxLayout

# Keys handled by widgets rather than menu actions (composer, edit box, pane).
IN_PANE = [("Enter", "Send the message"),
           ("Shift+Enter", "New line in the message"),
           ("Esc", "Stop the reply of the pane that has focus"),
           ("Ctrl+Enter", "Send an edited message"),
           ("Esc (editing)", "Cancel the edit"),
           ("F2 (Enter on macOS), in the chat list", "Rename the selected chat")]


def menu_shortcuts(window) -> list[tuple[str, str]]:
    """(keys, what they do) for every action in the window's menus that has keys."""
    rows = []
    for top in window.menuBar().actions():
        menu = top.menu()
        for action in menu.actions() if menu else []:
            keys = [k.toString(QKeySequence.SequenceFormat.NativeText)
                    for k in action.shortcuts() if not k.isEmpty()]
            if keys:
                name = f"{top.text().replace('&', '')} → {action.text().replace('&', '')}"
                rows.append((", ".join(keys), name.rstrip("…")))
    return rows


class ShortcutsDialog(QDialog):
    def __init__(self, window, parent=None):
        super().__init__(parent or window)
        self.setWindowTitle("Keyboard shortcuts")
        self.resize(520, 460)
        self.rows = menu_shortcuts(window) + IN_PANE
        self.table = QTableWidget(len(self.rows), 2, objectName="shortcutTable")
        self.table.setHorizontalHeaderLabels(["Keys", "Does"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        for row, (keys, does) in enumerate(self.rows):
            self.table.setItem(row, 0, QTableWidgetItem(keys))
            self.table.setItem(row, 1, QTableWidgetItem(does))
        self.table.resizeColumnToContents(0)
        self.table.horizontalHeader().setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons, 0, Qt.AlignmentFlag.AlignRight)
