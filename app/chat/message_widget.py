"""One message bubble: role, reasoning, Markdown body, stats and actions.
It only renders a Message and reports clicks; the session does the work."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.markdown_view import MarkdownView
from app.chat.think_block import ThinkBlock
from app.chat.think_text import split_think
from app.storage.message import Message, MessageState

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
    if msg.is_streaming:
        parts.append("streaming…")
    if msg.state in _BADGES:
        parts.append(_BADGES[msg.state] + (f": {msg.error}" if msg.error else ""))
    return "  ·  ".join(parts)


class MessageWidget(QWidget):
    """Signals:
        stop_requested()
        regenerate_requested()
        edit_submitted(str): the edited text of a user message
    """
    stop_requested = Signal()
    regenerate_requested = Signal()
    edit_submitted = Signal(str)

    def __init__(self, msg: Message, parent=None):
        super().__init__(parent)
        self.message = msg
        self.bubble = QFrame(objectName="bubble")
        self.bubble.setProperty("role", msg.role)
        self.role_label = QLabel("You" if msg.role == "user" else (msg.model or "Assistant"),
                                 objectName="roleLabel")
        self.think = ThinkBlock()
        self.body = MarkdownView()
        self.editor = QPlainTextEdit(objectName="editEditor")
        self.stats = QLabel(objectName="statsLabel")
        self.stats.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stats.setWordWrap(True)     # narrow panes: wrap, never widen the bubble
        self.stats.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.role_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.buttons = self._make_buttons()
        self._lay_out()
        self.set_message(msg)

    def _make_buttons(self) -> dict[str, QToolButton]:
        names = {"stop": ("■ Stop", "Stop generating"), "regenerate": ("↻", "Regenerate"),
                 "edit": ("✎", "Edit and resend"), "copy": ("Copy", "Copy the text"),
                 "send_edit": ("Send", "Send the edited message"), "cancel_edit": ("Cancel", "")}
        buttons = {k: QToolButton(text=text, toolTip=tip, objectName="messageAction")
                   for k, (text, tip) in names.items()}
        buttons["stop"].clicked.connect(self.stop_requested)
        buttons["regenerate"].clicked.connect(self.regenerate_requested)
        buttons["copy"].clicked.connect(self._on_copy_clicked)
        buttons["edit"].clicked.connect(self.start_edit)
        buttons["send_edit"].clicked.connect(self._on_send_edit_clicked)
        buttons["cancel_edit"].clicked.connect(self.cancel_edit)
        return buttons

    def _lay_out(self) -> None:
        inner = QVBoxLayout(self.bubble)
        inner.setContentsMargins(12, 8, 12, 6)
        inner.setSpacing(4)
        inner.addWidget(self.role_label)
        for widget in (self.think, self.body, self.editor):
            inner.addWidget(widget)
        self.editor.hide()
        footer = QHBoxLayout()
        footer.setSpacing(2)
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
        parts = split_think(msg.content) if msg.role == "assistant" else None
        self.think.setVisible(bool(parts and parts.has_reasoning))
        if parts and parts.has_reasoning:
            self.think.set_reasoning(parts.reasoning, parts.thinking)
        answer = parts.answer if parts else msg.content
        self.body.set_markdown(answer if answer.strip() or not msg.is_streaming else "…")
        self.stats.setText(stats_text(msg))
        self._update_buttons()

    def _update_buttons(self) -> None:
        editing = self.editor.isVisible()
        assistant, streaming = self.message.role == "assistant", self.message.is_streaming
        shown = {"stop": streaming, "regenerate": assistant and not streaming,
                 "edit": not assistant and not editing, "copy": not editing,
                 "send_edit": editing, "cancel_edit": editing}
        for name, visible in shown.items():
            self.buttons[name].setVisible(visible)

    def start_edit(self) -> None:
        self.editor.setPlainText(self.message.content)
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
