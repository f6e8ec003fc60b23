"""Saves and restores the window: geometry, dock state, open panes and
splitter sizes, in the settings table."""
from __future__ import annotations

import base64

from PySide6.QtCore import QByteArray

KEY = "window"
SIDEBAR_MIN_WIDTH = 180     # px: the chat list stays readable
CENTER_MIN_WIDTH = 360      # px: one pane and its composer


def _b64(data: QByteArray) -> str:
    return base64.b64encode(bytes(data)).decode()


def _bytes(text: str) -> QByteArray:
    return QByteArray(base64.b64decode(text.encode()))


def save_window_state(window, store) -> None:
    panes = window.panes.panes()
    store.set_setting(KEY, {
        "geometry": _b64(window.saveGeometry()),
        "state": _b64(window.saveState()),
        "panes": [p.session.conversation.id for p in panes],
        "active": window.panes.active.session.conversation.id if window.panes.active else None,
        "pane_sizes": window.panes.splitter.sizes(),
        "main_sizes": window.main_splitter.sizes(),
    })


def restore_window_state(window, store) -> bool:
    """Reopen the saved panes; False if there was nothing to restore."""
    saved = store.get_setting(KEY)
    if not saved:
        return False
    window.restoreGeometry(_bytes(saved.get("geometry", "")))
    window.restoreState(_bytes(saved.get("state", "")))
    for conv_id in saved.get("panes", []):
        window.open_conversation(conv_id, new_pane=True)
    if saved.get("active") is not None:
        pane = window.panes.pane_for(saved["active"])
        if pane is not None:
            window.panes.set_active(pane)
    if saved.get("main_sizes"):
        window.main_splitter.setSizes(clamped_main_sizes(saved["main_sizes"]))
    if len(saved.get("pane_sizes", [])) == len(window.panes.panes()):
        window.panes.splitter.setSizes(saved["pane_sizes"])
    return True


def clamped_main_sizes(sizes) -> list[int]:
    """Saved [sidebar, center] widths, each at least its minimum: a chat list squeezed
    once (by a panel that grew) is not squeezed again at every start."""
    if len(sizes) != 2 or not all(isinstance(s, int) for s in sizes):
        return [260, 1020]
    return [max(sizes[0], SIDEBAR_MIN_WIDTH), max(sizes[1], CENTER_MIN_WIDTH)]
