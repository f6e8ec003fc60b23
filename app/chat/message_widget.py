"""One message bubble: role, reasoning, Markdown body, stats and actions.
It only renders a Message and reports clicks; the session does the work."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.edit_box import EditBox
from app.chat.elided_label import ElidedLabel
from app.chat.markdown_view import MarkdownView
from app.chat.think_block import ThinkBlock
from app.chat.think_text import split_think
from app.chat.tool_call_block import ToolCallList
from app.chat.tool_call_text import split_tool_calls
from app.chat.version_switcher import VersionSwitcher
from app.storage.message import CONTINUABLE, Message, MessageState
from app.storage.message_versions import num_versions

_BADGES = {MessageState.STOPPED: "stopped", MessageState.LENGTH: "max tokens",
           MessageState.INTERRUPTED: "interrupted", MessageState.ERROR: "error"}


def stats_text(msg: Message) -> str:
    if msg.role != "assistant":
        return ""
    parts = []
    if msg.ttft_s is not None:
        parts.append(f"TTFT {msg.ttft_s * 1000:.0f} ms" if msg.ttft_s < 1
                     else f"TTFT {msg.ttft_s:.2f} s")
    if msg.decode_tok_s and not msg.is_streaming:
        parts.append(f"{msg.decode_tok_s:.1f} tok/s")
    if msg.num_tokens:
        parts.append(f"{msg.num_tokens} tokens")
    if msg.cached_tokens and msg.prompt_tokens and not msg.is_streaming:
        # The conversation's history came from the prompt cache (memory or disk).
        parts.append(f"reused {msg.cached_tokens:,} of {msg.prompt_tokens:,} prompt tokens")
    if msg.is_streaming:      # the same words as the status panel's list
        parts.append("streaming…" if msg.num_tokens else "reading prompt…")
    if msg.state in _BADGES:
        parts.append(_BADGES[msg.state] + (f": {msg.error}" if msg.error else ""))
    return "  ·  ".join(parts)


class MessageWidget(QWidget):
    """Signals:
        stop_requested()
        regenerate_requested()
        edit_submitted(str): the edited text of a user message
        version_requested(int): the answer's version to show (0-based)
        continue_requested(): carry on this reply, cut short, from where it ended
    """
    stop_requested = Signal()
    regenerate_requested = Signal()
    edit_submitted = Signal(str)
    version_requested = Signal(int)
    continue_requested = Signal()

    def __init__(self, msg: Message, parent=None):
        super().__init__(parent)
        self.message = msg
        self.waiting_text = ""       # what a reply shows before its first token
        self.is_last = False         # the conversation's last message (Continue shows)
        self.bubble = QFrame(objectName="bubble")
        self.bubble.setProperty("role", msg.role)
        self.role_label = QLabel("You" if msg.role == "user" else (msg.model or "Assistant"),
                                 objectName="roleLabel")
        self.think = ThinkBlock()
        self.body = MarkdownView()
        self.calls = ToolCallList()      # tool calls the reply wrote, each its own block
        self.editor = EditBox()
        # Narrow panes: one elided line (all of it in the tooltip), never a wider bubble.
        self.stats = ElidedLabel(objectName="statsLabel")
        self.stats.setTextFormat(Qt.TextFormat.PlainText)
        self.role_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.buttons = self._make_buttons()
        # An edited message's versions each come back with the answers they had.
        self.versions = VersionSwitcher("answer" if msg.role == "assistant"
                                        else "message with its answers")
        self.versions.selected.connect(self.version_requested)
        self._lay_out()
        self.set_message(msg)

    def _make_buttons(self) -> dict[str, QToolButton | QPushButton]:
        names = {"stop": ("■ Stop", "Stop generating (Esc)"), "regenerate": ("↻", "Regenerate"),
                 "edit": ("✎", "Edit and resend"), "copy": ("Copy", "Copy the text"),
                 "continue": ("Continue", "Continue this reply from where it stopped")}
        buttons = {k: QToolButton(text=text, toolTip=tip, objectName="messageAction")
                   for k, (text, tip) in names.items()}
        # The edit box's own buttons are real push buttons, so they read as actions.
        buttons["send_edit"] = QPushButton("Send", objectName="editSend",
                                           toolTip="Send the edited message (Ctrl+Enter)")
        buttons["cancel_edit"] = QPushButton("Cancel", objectName="editCancel",
                                             toolTip="Keep the message as it was (Esc)")
        buttons["stop"].clicked.connect(self.stop_requested)
        buttons["regenerate"].clicked.connect(self.regenerate_requested)
        buttons["continue"].clicked.connect(self.continue_requested)
        buttons["copy"].clicked.connect(self._on_copy_clicked)
        buttons["edit"].clicked.connect(self.start_edit)
        buttons["send_edit"].clicked.connect(self._on_send_edit_clicked)
        buttons["cancel_edit"].clicked.connect(self.cancel_edit)
        self.editor.save_requested.connect(self._on_send_edit_clicked)
        self.editor.cancel_requested.connect(self.cancel_edit)
        return buttons

    def _lay_out(self) -> None:
        inner = QVBoxLayout(self.bubble)
        inner.setContentsMargins(12, 8, 12, 6)
        inner.setSpacing(4)
        inner.addWidget(self.role_label)
        for widget in (self.think, self.body, self.calls, self.editor):
            inner.addWidget(widget)
        self.editor.hide()
        self.calls.hide()
        footer = QHBoxLayout()
        footer.setSpacing(2)
        footer.addWidget(self.versions)
        footer.addWidget(self.stats, 1)
        for button in self.buttons.values():
            footer.addWidget(button)
        inner.addLayout(footer)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(8, 4, 8, 4)
        if self.message.role == "user":
            outer.addSpacing(36)
        outer.addWidget(self.bubble, 1)
        if self.message.role != "user":
            outer.addSpacing(12)

    def set_message(self, msg: Message) -> None:
        self.message = msg
        if msg.role == "assistant":       # the model is known once it is loaded
            self.role_label.setText(msg.model or "Assistant")
        parts = split_think(msg.content) if msg.role == "assistant" else None
        self.think.setVisible(bool(parts and parts.has_reasoning))
        if parts and parts.has_reasoning:
            self.think.set_reasoning(parts.reasoning, parts.thinking)
        if msg.role == "user":
            self.body.set_plain(msg.content)      # as typed: line breaks kept, no Markdown
        else:
            calls = split_tool_calls(parts.answer, msg.is_streaming)
            self.calls.set_calls(calls.calls, calls.pending)
            self.body.setVisible(bool(calls.text.strip()) or not (calls.calls or calls.pending))
            self.body.set_markdown(self._answer(msg, calls.text))
        stats = stats_text(msg)
        if self.waiting_text:      # not reading its prompt yet: the body says what it waits on
            stats = stats.replace("reading prompt…", "waiting…")
        self.stats.setText(stats)
        self.versions.set_versions(msg.version, num_versions(msg), not msg.is_streaming)
        self._update_buttons()

    def _answer(self, msg: Message, answer: str) -> str:
        if answer.strip() or not msg.is_streaming:
            return answer
        return self.waiting_text or "…"

    def set_last(self, last: bool) -> None:
        if last != self.is_last:
            self.is_last = last
            self._update_buttons()

    def set_waiting_text(self, text: str) -> None:
        self.waiting_text = text
        self.set_message(self.message)

    def _update_buttons(self) -> None:
        editing = self.editor.isVisible()
        assistant, streaming = self.message.role == "assistant", self.message.is_streaming
        cut = assistant and self.is_last and self.message.state in CONTINUABLE
        shown = {"stop": streaming, "regenerate": assistant and not streaming,
                 "continue": cut and bool(self.message.content),
                 "edit": not assistant and not editing, "copy": not editing,
                 "send_edit": editing, "cancel_edit": editing}
        for name, visible in shown.items():
            self.buttons[name].setVisible(visible)

    def start_edit(self) -> None:
        self.editor.setPlainText(self.message.content)
        self.editor.moveCursor(QTextCursor.MoveOperation.End)     # typing goes on at the end
        self.body.hide()
        self.editor.show()
        self.editor.setFocus()
        self._update_buttons()

    def cancel_edit(self) -> None:
        self.editor.hide()
        self.body.show()
        self._update_buttons()

    def _on_send_edit_clicked(self) -> None:
        text = self.editor.toPlainText()
        self.cancel_edit()
        if text.strip():
            self.edit_submitted.emit(text)

    def _on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(split_think(self.message.content).answer
                                            if self.message.role == "assistant"
                                            else self.message.content)
