"""Windows and panes: the main window, its menus and saved geometry, the pane area, dialogs."""
