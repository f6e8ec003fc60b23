"""Issue 13's rough edges, on the real engine (tiny random model): quitting
mid-reply, user text as typed, the model picker, loading shown in the reply,
broadcast with no pane, the status panel's words, the sidebar's highlight and
open marks, keyboard, and the reading width."""
from __future__ import annotations

import asyncio
import threading
import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QPushButton

from app.chat.chat_view import READING_WIDTH
from app.controllers.conversation_list_model import ConversationListModel
from app.status.activity import QUEUED, READING
from app.storage.message import MessageState
from engine.events import LoadProgress, StepEvent


def _reply(pane):
    model = pane.session.model
    return model.message(model.last_row())


def _tokens(pane) -> int:
    return _reply(pane).num_tokens or 0


# item 3
def test_quit_mid_reply_joins_the_engine_and_keeps_the_partial_reply(
        make_window, wait_until, endless_model_path):
    window = make_window(max_tokens=4000, model=endless_model_path)
    pane = window.panes.panes()[0]
    pane.session.send("Tell me a long story")
    wait_until(lambda: _tokens(pane) >= 4)
    engine_thread = window.bridge.engine._thread
    window.close()
    assert not engine_thread.is_alive() and window.bridge.engine is None
    saved = window.store.messages(pane.session.conversation.id)[-1]
    assert saved.state == MessageState.STOPPED and saved.content
    assert saved.content.startswith(_reply(pane).content[:1])


# item 5
def test_user_text_is_shown_as_typed(make_window, wait_until):
    window = make_window(max_tokens=4)
    pane = window.panes.panes()[0]
    text = "line one\nline two\n\n* not a list\n# not a heading"
    pane.session.send(text)
    body = pane.view.message_widgets()[0].body
    assert [kind for kind, _ in body._blocks] == ["plain"]
    assert body._blocks[0][1].toPlainText() == text
    wait_until(lambda: not pane.session.busy)


def test_composer_grows_with_lines_then_scrolls(make_window, run):
    composer = make_window(load=False).panes.panes()[0].composer
    one = composer.height()
    composer.setPlainText("a\nb\nc")
    three = composer.height()
    composer.setPlainText("word " * 400)             # one long line, wrapped
    wrapped = composer.height()
    composer.setPlainText("line\n" * 30)
    assert one < three < wrapped == composer.height()
    assert composer.verticalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAsNeeded


# item 6
def test_picker_lists_the_built_in_model_first_and_no_placeholder_opens(qtbot, tmp_path,
                                                                        monkeypatch):
    from app.controllers.model_discovery import FoundModel
    from app.windows import model_picker
    builtin = FoundModel("SmolLM2 (built-in)", str(tmp_path / "smol.gguf"), "Built-in")
    other = FoundModel("other", str(tmp_path / "other"), "LM Studio")
    picker = model_picker.ModelPicker([other.path], found=[other], builtin=builtin)
    qtbot.addWidget(picker)
    rows = [picker.list.item(i) for i in range(picker.list.count())]
    paths = [r.data(Qt.ItemDataRole.UserRole) for r in rows if r.data(Qt.ItemDataRole.UserRole)]
    assert paths == [builtin.path, other.path]            # built-in first, no duplicate
    assert picker.list.currentItem().data(Qt.ItemDataRole.UserRole) == builtin.path
    empty = model_picker.ModelPicker([], found=[], builtin=None)
    qtbot.addWidget(empty)
    (note,) = [empty.list.item(i) for i in range(empty.list.count())]
    assert note.flags() == Qt.ItemFlag.NoItemFlags and not empty.open_button.isEnabled()
    # The open-file dialog starts in the models folder.
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    asked = []
    monkeypatch.setattr(model_picker.QFileDialog, "getOpenFileName",
                        lambda *a: (asked.append(a[2]), ("", ""))[1])
    empty._on_gguf_clicked()
    assert asked == [str(hub)]


def test_built_in_model_is_the_default_model():
    import pytest

    from app.controllers.model_discovery import builtin_model
    from engine.errors import DefaultModelMissingError
    from engine.loading.default_model import default_model_path
    try:
        expected = str(default_model_path())
    except DefaultModelMissingError:
        pytest.skip("the built-in model is not installed here")
    assert builtin_model().path == expected and builtin_model().source == "Built-in"


# item 7
def test_load_bar_label_is_one_elided_line(make_window):
    window = make_window(load=False)
    message = "Reading " + "SmolLM2-135M-Instruct-" * 10 + "Q4_1.gguf"
    window.load_status._on_bridge_load_progress(0.4, message)
    shown = window.progress.format()
    assert "…" in shown and window.progress.toolTip() == message
    assert window.progress.fontMetrics().horizontalAdvance(shown) < window.progress.width()


def test_a_send_while_the_model_loads_shows_loading_then_replies(make_window, model_path,
                                                                 run, wait_until):
    gate = threading.Event()

    def gated(loader):
        def load(model=None, config=None, on_progress=None):
            on_progress(LoadProgress(0.25, "Reading tiny weights"))
            gate.wait(60)
            return loader(model=model, config=config, on_progress=on_progress)
        return load

    window = make_window(load=False, wrap_loader=gated)
    pane = window.panes.panes()[0]
    loading = asyncio.ensure_future(window.load_model(model_path))
    wait_until(lambda: window.bridge.loading)
    assert pane.session.send("hello")
    widget = pane.view.message_widgets()[-1]
    wait_until(lambda: "25%" in widget.waiting_text)
    shown = widget.body._blocks[0][1].toPlainText()
    assert shown.startswith("Loading the model… 25%") and pane.session.busy
    assert window.status_panel._activity()[0].phase == "waiting for the model"
    gate.set()
    assert run(loading)
    wait_until(lambda: not pane.session.busy)
    assert _reply(pane).state in (MessageState.DONE, MessageState.LENGTH)
    assert _tokens(pane) > 0 and widget.waiting_text == ""


# item 8
def test_broadcast_with_no_pane_opens_a_chat_and_sends(make_window, wait_until, qtbot):
    window = make_window(max_tokens=4)
    for pane in window.panes.panes():
        window.close_pane(pane)
    qtbot.keyClicks(window.broadcast.composer, "same question")
    window.broadcast.button.click()
    (pane,) = window.panes.panes()
    assert pane.session.model.message(0).content == "same question"
    assert window.broadcast.composer.toPlainText() == ""
    wait_until(lambda: not pane.session.busy)
    assert _tokens(pane) > 0


# item 10
def test_status_rows_are_named_after_what_they_measure(make_window, qtbot):
    from fixed_sampler import FixedSampler, fixed_monitor
    gpu = fixed_monitor()
    panel = make_window(load=False, telemetry=gpu).status_panel
    gpu.sample_once()
    qtbot.waitUntil(lambda: panel.value_text("mhz") == "1398 MHz")
    assert (panel.name_text("mhz"), panel.name_text("watts")) == ("GPU MHz", "GPU W")
    FixedSampler.mhz_label, FixedSampler.source = "CPU MHz", "procfs"
    try:
        gpu.sample_once()
        qtbot.waitUntil(lambda: panel.name_text("mhz") == "CPU MHz")
        assert panel.name_text("watts") == "CPU W"
    finally:
        FixedSampler.mhz_label, FixedSampler.source = "SM clock MHz", "NVML"


def test_status_phases_agree_and_finished_replies_leave_the_list(make_window, wait_until):
    window = make_window(max_tokens=6)
    panel, pane = window.status_panel, window.panes.panes()[0]
    pane.session.send("hi")            # no token, and no step event, has reached the window
    assert pane.session.phase == READING
    panel._on_timer_timeout()          # the engine has not admitted it (as far as seen): queued
    assert panel.value_text("batch") == "0"
    assert panel.caption_text("batch") == f"decode batch · 1 {QUEUED}"
    assert panel.per_conversation.text().endswith(f"  {QUEUED}")
    # the engine's first step reads the prompt: the list and caption say so together
    now = time.perf_counter()
    panel.stats.add_step(StepEvent(1, now, now, "prefill", (), batch_size=0,
                                   prefill_request_ids=(pane.session.request_id,),
                                   prefill_tokens=8))
    panel._on_timer_timeout()
    assert panel.caption_text("batch") == "decode batch · 1 reading prompt"
    assert panel.per_conversation.text().endswith("reading prompt")
    wait_until(lambda: not pane.session.busy)
    assert panel.stats.snapshot().per_request_tok_s       # its rate is still in the window
    panel._on_timer_timeout()
    assert panel.per_conversation.text() == "idle"
    assert panel.caption_text("batch") == "decode batch · idle"


def test_kv_row_shows_pages_and_megabytes_of_the_pool(make_window, wait_until):
    window = make_window(max_tokens=4)
    pane = window.panes.panes()[0]
    pane.session.send("hi")
    wait_until(lambda: not pane.session.busy)
    window.status_panel._on_timer_timeout()
    engine = window.bridge.engine
    total = engine.num_pages - 1                           # the scratch page aside
    used, of = window.status_panel.value_text("kv").removesuffix(" pages").split(" / ")
    assert int(of) == total and int(used) > 0
    mb = engine.kv_page_bytes / (1 << 20)
    assert window.status_panel.caption_text("kv") == (
        f"{int(used) * mb:.1f} of {total * mb:.0f} MB KV cache")


# item 11
def _highlighted(window):
    return window.sidebar.list.currentIndex().data(ConversationListModel.IdRole)


def test_sidebar_highlights_the_active_chat_and_marks_open_ones(make_window):
    window = make_window(load=False)
    first = window.panes.panes()[0]
    assert _highlighted(window) == first.session.conversation.id       # at first start
    second = window.new_conversation(True)
    assert _highlighted(window) == second.session.conversation.id
    window.sidebar.list.model().setData(
        window.sidebar.list.model().index(window.conversations.row_of(
            second.session.conversation.id)), "renamed")
    assert _highlighted(window) == second.session.conversation.id       # after a rename
    third = window.new_conversation(True)
    window.close_pane(third)
    model = window.conversations
    marks = {model.index(r).data(ConversationListModel.IdRole):
             model.index(r).data(ConversationListModel.OpenRole) for r in range(model.rowCount())}
    assert marks[first.session.conversation.id] and marks[second.session.conversation.id]
    assert not marks[third.session.conversation.id]


# item 12
def test_escape_stops_the_focused_panes_reply(make_window, wait_until, qtbot):
    window = make_window(max_tokens=400)
    a = window.panes.panes()[0]
    b = window.new_conversation(True)
    a.session.send("story one")
    b.session.send("story two")
    wait_until(lambda: _tokens(a) >= 2 and _tokens(b) >= 2)
    window.activateWindow()
    a.composer.setFocus()
    qtbot.keyClick(a.composer, Qt.Key.Key_Escape)
    wait_until(lambda: not a.session.busy)
    assert _reply(a).state == MessageState.STOPPED and b.session.busy
    b.session.stop()
    wait_until(lambda: not b.session.busy)


def test_edit_box_ctrl_enter_sends_escape_cancels_buttons_are_buttons(make_window, qtbot,
                                                                      wait_until):
    window = make_window(max_tokens=4)
    pane = window.panes.panes()[0]
    pane.session.send("first")
    wait_until(lambda: not pane.session.busy)
    widget = pane.view.message_widgets()[0]
    assert all(isinstance(widget.buttons[k], QPushButton) for k in ("send_edit", "cancel_edit"))
    widget.start_edit()
    qtbot.keyClicks(widget.editor, " more")
    qtbot.keyClick(widget.editor, Qt.Key.Key_Escape)
    assert widget.editor.isHidden() and pane.session.model.message(0).content == "first"
    widget.start_edit()
    qtbot.keyClicks(widget.editor, " again")
    qtbot.keyClick(widget.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert pane.session.model.message(0).content == "first again"
    wait_until(lambda: not pane.session.busy)


def test_ctrl_comma_opens_settings(make_window):
    window = make_window(load=False)
    (action,) = [a for a in window.menuBar().actions()[0].menu().actions()
                 if a.text() == "Settings…"]
    assert QKeySequence("Ctrl+,") in action.shortcuts()


# item 13
def test_a_wide_pane_keeps_a_centred_reading_column(make_window, qtbot):
    window = make_window(load=False)
    window.resize(2000, 900)
    window.status_panel.hide()
    pane = window.panes.panes()[0]
    qtbot.waitUntil(lambda: pane.view.viewport().width() > READING_WIDTH + 200)
    column = pane.view.column_widget
    assert column.width() == READING_WIDTH
    left = column.x()
    right = pane.view.viewport().width() - column.x() - column.width()
    assert abs(left - right) <= 2


def test_reply_footer_says_reading_prompt_until_the_first_token():
    from app.chat.message_widget import stats_text
    from app.storage.message import Message
    reading = Message("assistant", state=MessageState.STREAMING, num_tokens=0)
    streaming = Message("assistant", state=MessageState.STREAMING, num_tokens=3)
    assert stats_text(reading).endswith("reading prompt…")
    assert stats_text(streaming).endswith("streaming…")
