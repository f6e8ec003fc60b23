"""Issue 22 item 13 (the app's part): code keeps its long lines and scrolls sideways,
sidebar previews are plain words, a narrow pane's footer is one elided line, the
trace names a CPU clock for what it is, and About says when a folder cannot open."""
from __future__ import annotations

from app.storage.message import Message
from app.storage.snippet_text import snippet
from engine.telemetry.reading import Reading
from engine.telemetry.trace_format import CPU_MHZ, GPU_MHZ, TraceFormatter


def test_a_long_code_line_scrolls_instead_of_wrapping(qtbot):
    from app.chat.code_block import CodeBlock
    block = CodeBlock()
    qtbot.addWidget(block)
    block.resize(300, 100)
    block.show()
    line = "x = some_function_name(" + ", ".join(f"argument_{i}" for i in range(30)) + ")"
    block.set_code(line + "\nshort", "python")
    qtbot.waitUntil(lambda: block.text.horizontalScrollBar().maximum() > 0)
    layout = block.text.document().firstBlock().layout()
    assert layout.lineCount() == 1                           # one line, not broken
    assert block.text.height() > block.text.document().size().height()   # room for the bar


def test_sidebar_previews_are_plain_words(make_window):
    assert snippet("**Paris** is the `capital` of *France*.") == \
        "Paris is the capital of France."
    assert snippet("# Plan\n- [docs](http://x)\n```py\nprint(1)\n```") == "Plan docs print(1)"
    assert snippet("<think>hmm</think>snake_case stays") == "snake_case stays"
    window = make_window(load=False)
    session = window.panes.panes()[0].session
    window.store.add_message(session.conversation.id, 0,
                             Message("assistant", "## Answer\n**bold** and `code`"))
    window.conversations.refresh()
    assert window.store.conversations()[0].snippet == "Answer bold and code"


def test_a_narrow_panes_footer_is_one_elided_line(make_window, wait_until, qtbot):
    window = make_window(max_tokens=4)
    pane = window.panes.panes()[0]
    pane.session.send("hi")
    wait_until(lambda: not pane.session.busy)
    widget = pane.view.message_widgets()[-1]
    full = widget.stats.text()
    assert "tokens" in full
    window.resize(700, 700)
    window.main_splitter.setSizes([180, 520])
    widget.stats.setText(full + "  ·  reused 1,234 of 5,678 prompt tokens  ·  stopped")
    widget.bubble.resize(240, widget.bubble.height())
    qtbot.waitUntil(lambda: widget.stats.width() < widget.stats.fontMetrics()
                    .horizontalAdvance(widget.stats.text()))
    assert widget.stats.is_elided() and widget.stats.shown_text().endswith("…")
    assert widget.stats.toolTip() == widget.stats.text()
    assert widget.stats.height() <= widget.stats.fontMetrics().height() * 2     # one line


def test_the_trace_names_a_cpu_clock_cpu_mhz():
    def counters(label):
        fmt = TraceFormatter(pid=1, start_t=0.0)
        events = fmt._reading(Reading(t=1.0, gpu_mhz=2400.0, gpu_watts=None,
                                      mhz_label=label, source="procfs"))
        return {e["name"] for e in events}
    assert counters("CPU MHz") == {CPU_MHZ}
    assert counters("SM clock MHz") == {GPU_MHZ}


def test_about_says_when_no_file_manager_opens_a_folder(make_window, data_dir, monkeypatch):
    window = make_window(load=False)
    monkeypatch.setattr("app.windows.about_dialog.QDesktopServices.openUrl",
                        lambda url: False)
    dialog = window.show_about()
    assert not dialog.notice.isVisible()
    dialog.open_buttons["Data folder"].click()
    assert dialog.notice.isVisible() and "No file manager" in dialog.notice.text()
    from PySide6.QtGui import QGuiApplication
    assert QGuiApplication.clipboard().text() == str(data_dir)
