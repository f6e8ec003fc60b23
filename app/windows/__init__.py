"""Windows and panes: the main window (its menus, saved geometry), the sidebar, the pane
area and its chat panes, the broadcast box, the model picker and the settings dialogs,
whose fields are built from engine/settings_spec.py."""
