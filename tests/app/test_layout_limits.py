"""Issue 22 item 8: long status lines wrap instead of widening the status panel, the
chat list keeps a readable width (also when a squeezed width was saved), and the
panel follows the font back down after a font change."""
from __future__ import annotations

from app.status.activity import DEGRADED_NOTE
from app.windows.window_state import (
    CENTER_MIN_WIDTH,
    SIDEBAR_MIN_WIDTH,
    clamped_main_sizes,
    save_window_state,
)


def test_a_long_status_line_wraps_and_does_not_widen_the_panel(make_window, qtbot):
    window = make_window(load=False)
    panel = window.status_panel
    qtbot.waitUntil(lambda: panel.width() > 0)
    before, sidebar = panel.width(), window.sidebar.width()
    panel.per_conversation.setText("A chat with a long title  12.3 tok/s\n" + DEGRADED_NOTE
                                   + " " + DEGRADED_NOTE)
    panel.kernels.setText("kernels: " + "reference (no GPU backend in this MLX build) " * 4)
    qtbot.wait(1)          # one turn of the event loop: layouts settle
    assert panel.width() == before <= panel.maximumWidth()
    assert window.sidebar.width() == sidebar >= SIDEBAR_MIN_WIDTH
    assert panel.per_conversation.heightForWidth(panel.per_conversation.width()) > \
        panel.per_conversation.fontMetrics().height() * 2          # wrapped, not widened


def test_a_squeezed_sidebar_is_not_restored(make_window, qtbot):
    window = make_window(load=False)
    window.main_splitter.setSizes([40, 1200])
    assert window.main_splitter.sizes()[0] >= SIDEBAR_MIN_WIDTH   # it cannot be dragged there
    save_window_state(window, window.store)
    saved = window.store.get_setting("window")
    saved["main_sizes"] = [90, 1100]            # as an older release saved it
    window.store.set_setting("window", saved)
    window.close()
    again = make_window(load=False)
    qtbot.waitUntil(lambda: again.sidebar.width() > 0)
    assert again.sidebar.width() >= SIDEBAR_MIN_WIDTH
    assert clamped_main_sizes([90, 100]) == [SIDEBAR_MIN_WIDTH, CENTER_MIN_WIDTH]
    assert clamped_main_sizes(["x"]) == [260, 1020]


def test_the_panel_comes_back_after_a_big_font(make_window, qtbot):
    window = make_window(load=False)
    panel = window.status_panel
    window.appearance.apply("light", 13)
    qtbot.wait(20)
    narrow = panel.width()
    window.appearance.apply("light", 19)
    qtbot.waitUntil(lambda: panel.width() > narrow)
    window.appearance.apply("light", 13)
    qtbot.waitUntil(lambda: panel.width() == narrow)
    assert window.sidebar.width() >= SIDEBAR_MIN_WIDTH
