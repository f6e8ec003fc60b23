"""A conversation's live state: its ChatModel, its one request in flight, and
the verbs on it (send, stop, regenerate, edit and resend)."""
from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from app.chat.think_text import strip_think
from app.controllers.chat_model import ChatModel
from app.storage.conversation import Conversation
from app.storage.message import Message, MessageState
from engine.errors import TandemError

SAVE_MS = 1000     # a streaming message reaches the database at least this often
_FINAL_STATE = {"stop": MessageState.DONE, "length": MessageState.LENGTH,
                "cancelled": MessageState.STOPPED, "error": MessageState.ERROR}


class ChatSession(QObject):
    """Signals:
        busy_changed(bool): a request started or ended
        conversation_changed(): title or settings changed (sidebar refresh)
        error(str): a request could not be submitted
    """
    busy_changed = Signal(bool)
    conversation_changed = Signal()
    error = Signal(str)

    def __init__(self, conversation: Conversation, store, bridge, parent=None):
        super().__init__(parent)
        self.conversation = conversation
        self._store = store
        self._bridge = bridge
        self.model = ChatModel(store.messages(conversation.id), self)
        self.request_id: int | None = None
        self._row: int | None = None
        self._save = QTimer(self, interval=SAVE_MS)
        self._save.timeout.connect(self._on_save_timeout)
        bridge.token_received.connect(self._on_bridge_token_received)
        bridge.request_finished.connect(self._on_bridge_request_finished)

    @property
    def busy(self) -> bool:
        return self.request_id is not None

    @property
    def title(self) -> str:
        return self.conversation.title

    # verbs
    def send(self, text: str) -> bool:
        text = text.strip()
        if not text:
            return False
        self._abandon()
        self._add(Message("user", text))
        self._maybe_title(text)
        return self._generate()

    def stop(self) -> None:
        if self.request_id is not None:
            self._bridge.cancel(self.request_id)

    def regenerate(self, row: int) -> bool:
        """Replace the assistant message at `row` (and all after it) with a new reply."""
        if self.model.message(row).role != "assistant":
            return False
        self._abandon()
        self._truncate(row)
        return self._generate()

    def edit_and_resend(self, row: int, text: str) -> bool:
        """Replace the user message at `row` with `text`, drop what followed, reply again."""
        if self.model.message(row).role != "user" or not text.strip():
            return False
        self._abandon()
        self._truncate(row)
        self._add(Message("user", text.strip()))
        return self._generate()

    def update_conversation(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self._store.update_conversation(conversation)
        self.conversation_changed.emit()

    def close(self) -> None:
        self._abandon()
        self._bridge.token_received.disconnect(self._on_bridge_token_received)
        self._bridge.request_finished.disconnect(self._on_bridge_request_finished)

    # internals
    def _prompt(self) -> list[dict]:
        prompt = []
        if self.conversation.system_prompt.strip():
            prompt.append({"role": "system", "content": self.conversation.system_prompt})
        for msg in self.model.messages():
            content = strip_think(msg.content) if msg.role == "assistant" else msg.content
            if content.strip():
                prompt.append({"role": msg.role, "content": content})
        return prompt

    def _generate(self) -> bool:
        prompt = self._prompt()
        try:
            rid = self._bridge.submit(prompt, self.conversation.sampling_params())
        except (TandemError, ValueError) as exc:    # no model, prompt too long, empty
            self.error.emit(str(exc))
            return False
        reply = Message("assistant", state=MessageState.STREAMING,
                        model=self._bridge.model_name, num_tokens=0)
        self._row = self._add(reply)
        self.request_id = rid
        self._t_submit = time.perf_counter()
        self._save.start()
        self.busy_changed.emit(True)
        return True

    def _add(self, msg: Message) -> int:
        position = len(self.model.messages())
        msg.id = self._store.add_message(self.conversation.id, position, msg)
        self.conversation_changed.emit()
        return self.model.append(msg)

    def _truncate(self, row: int) -> None:
        self._store.truncate_messages(self.conversation.id, row)
        self.model.truncate(row)

    def _abandon(self) -> None:
        """Stop listening to the request in flight and mark its message stopped."""
        if self.request_id is None:
            return
        self._bridge.cancel(self.request_id)
        self._end(MessageState.STOPPED, None, "")

    def _maybe_title(self, text: str) -> None:
        if self.conversation.title == "New chat":
            title = " ".join(text.split())
            self.update_conversation(self.conversation.copy(
                title=title[:48] + ("…" if len(title) > 48 else "")))

    def _end(self, state: str, stats, error: str) -> None:
        msg = self.model.message(self._row)
        msg.state, msg.error = state, error
        if stats is not None:
            msg.ttft_s, msg.decode_tok_s = stats.ttft_s, stats.decode_tok_s
            msg.num_tokens, msg.prompt_tokens = stats.generated_tokens, stats.prompt_tokens
            msg.cached_tokens = stats.cached_tokens
        self._store.update_message(msg)
        self.model.replace(self._row, msg)
        self._save.stop()
        self.request_id = self._row = None
        self.busy_changed.emit(False)
        self.conversation_changed.emit()

    # slots
    def _on_bridge_token_received(self, request_id: int, text: str, num_tokens: int) -> None:
        if request_id != self.request_id:
            return
        msg = self.model.message(self._row)
        if msg.ttft_s is None:
            msg.ttft_s = time.perf_counter() - self._t_submit
        self.model.append_text(self._row, text, num_tokens)

    def _on_bridge_request_finished(self, request_id, reason, stats, text, error) -> None:
        if request_id != self.request_id:
            return
        if text:
            self.model.message(self._row).content = text
        self._end(_FINAL_STATE.get(reason, MessageState.DONE), stats, error)

    def _on_save_timeout(self) -> None:
        if self._row is not None:
            self._store.update_message(self.model.message(self._row))
