"""A conversation's live state: its ChatModel, its one request in flight, and
the verbs on it: send and stop here; continue, regenerate, edit and resend and the
versions in history_edits.py."""
from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from app.controllers.chat_model import ChatModel
from app.controllers.conversation_prompt import context_tokens, prompt_messages, title_from
from app.controllers.history_edits import HistoryEdits
from app.status.activity import READING, STREAMING, WAITING_FOR_MODEL
from app.storage.conversation import Conversation
from app.storage.message import Message, MessageState
from app.storage.message_versions import with_new_version
from engine.errors import TandemError

SAVE_MS = 1000     # a streaming message reaches the database at least this often
_FINAL_STATE = {"stop": MessageState.DONE, "length": MessageState.LENGTH,
                "cancelled": MessageState.STOPPED, "error": MessageState.ERROR}


class ChatSession(QObject, HistoryEdits):
    """Signals:
        busy_changed(bool): a request started or ended
        conversation_changed(): title or settings changed (sidebar refresh)
        error(str): a request could not be submitted
        waiting_changed(str): what the reply shows before its first token ("" = nothing)
        max_context_changed(): a model loaded (the context's size may be another)
    """
    busy_changed = Signal(bool)
    conversation_changed = Signal()
    error = Signal(str)
    waiting_changed = Signal(str)
    max_context_changed = Signal()

    def __init__(self, conversation: Conversation, store, bridge, parent=None):
        super().__init__(parent)
        self.conversation = conversation
        self._store = store
        self._bridge = bridge
        self.model = ChatModel(store.messages(conversation.id), self)
        self.request_id: int | None = None
        self.waiting_for_model = False     # sent while the model loads: submitted once loaded
        self._row: int | None = None
        self._continued = ("", 0)    # a continued answer: its text and tokens before
        self._save = QTimer(self, interval=SAVE_MS)
        self._save.timeout.connect(self._on_save_timeout)
        for signal, slot in self._bridge_slots():
            signal.connect(slot)
        self._warm_schema()

    @property
    def busy(self) -> bool:
        return self.request_id is not None or self.waiting_for_model

    @property
    def phase(self) -> str:
        """What the reply in flight is doing as far as this session knows: waiting for
        the model to load, sent with no token yet (READING; the status panel tells
        queued from reading by the engine's steps), or streaming; "" when there is none."""
        if self.waiting_for_model:
            return WAITING_FOR_MODEL
        if self.request_id is None:
            return ""
        return STREAMING if self.model.message(self._row).num_tokens else READING

    @property
    def title(self) -> str:
        return self.conversation.title

    # verbs
    def send(self, text: str) -> bool:
        t_sent = time.perf_counter()     # the reply's time to first token counts from here
        text = text.strip()
        if not text:
            return False
        self._abandon()
        self._add(Message("user", text))
        self._maybe_title(text)
        return self._generate(t_sent=t_sent)

    def stop(self) -> None:
        if self.waiting_for_model:
            self._end(MessageState.STOPPED, None, "")
        elif self.request_id is not None:
            self._bridge.cancel(self.request_id)

    def update_conversation(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self._store.update_conversation(conversation)
        self._warm_schema()
        self.conversation_changed.emit()

    def _warm_schema(self) -> None:
        if self.conversation.json_schema:
            self._bridge.warm_json_schema()

    def close(self) -> None:
        self._abandon()
        for signal, slot in self._bridge_slots():
            signal.disconnect(slot)

    def _bridge_slots(self) -> list:
        b = self._bridge
        return [(b.request_submitted, self._on_bridge_request_submitted),
                (b.token_received, self._on_bridge_token_received),
                (b.request_finished, self._on_bridge_request_finished),
                (b.load_progress, self._on_bridge_load_progress),
                (b.model_loaded, self._on_bridge_model_loaded),
                (b.load_failed, self._on_bridge_load_failed)]

    # internals
    def _prompt(self, upto: int | None = None) -> list[dict]:
        """The conversation before row `upto` (all of it when None), as chat messages."""
        return prompt_messages(self.conversation, self.model.messages(), upto)

    @property
    def max_context(self) -> int | None:
        """The loaded engine's context per conversation (None: no model loaded)."""
        return getattr(getattr(self._bridge.engine, "config", None), "max_context", None)

    @property
    def context_tokens(self) -> int | None:
        """Tokens of the context this conversation fills (None: not known yet)."""
        return context_tokens(self.model.messages())

    def _generate(self, row: int | None = None, t_sent: float | None = None) -> bool:
        """Reply to the conversation: as a new message, or as a new version of the
        answer at `row` (which the prompt then stops before). `t_sent`: when the user
        sent it (time to first token counts from there, a wait for the model included)."""
        t_sent = time.perf_counter() if t_sent is None else t_sent
        if self._bridge.engine is None and self._bridge.loading:
            # The model is still loading (the first send after start): show the reply
            # waiting with the load's progress, and submit once it is loaded.
            self._row = self._place_reply(row)
            self._t_sent = t_sent
            self.waiting_for_model = True
            self.busy_changed.emit(True)
            self._on_bridge_load_progress(*self._bridge.last_progress)   # so far
            return True
        try:
            rid = self._submit(row)
        except (TandemError, ValueError) as exc:    # no model, prompt too long, empty
            self.error.emit(str(exc))
            return False
        self._row = self._place_reply(row)
        self._t_sent = t_sent
        self._started(rid)
        self.busy_changed.emit(True)
        return True

    def _submit(self, upto: int | None) -> int:
        return self._bridge.submit(self._prompt(upto), self._params())

    def _params(self, answer: str = ""):
        """The conversation's sampling, constrained to its JSON schema when it has one
        (`answer`: the start of a reply being continued)."""
        params, schema = self.conversation.sampling_params(), self.conversation.schema
        return params if schema is None else self._bridge.with_json_schema(params, schema,
                                                                           answer)

    def _place_reply(self, row: int | None) -> int:
        """The streaming reply's row: a new message, or a new version of the one at `row`."""
        if row is None:
            return self._add(Message("assistant", state=MessageState.STREAMING,
                                     model=self._bridge.model_name, num_tokens=0))
        reply = with_new_version(self.model.message(row), self._bridge.model_name)
        self._store.update_message(reply)
        self.model.replace(row, reply)
        return row

    def _started(self, rid: int) -> None:
        self.request_id = rid
        self._save.start()

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
        if self.request_id is None and not self.waiting_for_model:
            return
        if self.request_id is not None:
            self._bridge.cancel(self.request_id)
        self._end(MessageState.STOPPED, None, "")

    def _maybe_title(self, text: str) -> None:
        if self.conversation.title == "New chat":
            self.update_conversation(self.conversation.copy(title=title_from(text)))

    def _end(self, state: str, stats, error: str) -> None:
        msg = self.model.message(self._row)
        msg.state, msg.error = state, error
        if stats is not None:
            # The figure shown while streaming stays: both count from the send (the
            # engine's from its submit call), and the one the user saw is the one kept.
            msg.ttft_s = stats.ttft_s if msg.ttft_s is None else msg.ttft_s
            msg.decode_tok_s = stats.decode_tok_s
            # A continued answer: its tokens so far count, and its prompt was the rest.
            before = self._continued[1]
            msg.num_tokens = before + stats.generated_tokens
            msg.prompt_tokens = max(stats.prompt_tokens - before, 0)
            msg.cached_tokens = (None if stats.cached_tokens is None
                                 else min(stats.cached_tokens, msg.prompt_tokens))
        self._store.update_message(msg)
        self.model.replace(self._row, msg)
        self._save.stop()
        self.request_id = self._row = None
        self._continued = ("", 0)
        self.waiting_for_model = False
        self.waiting_changed.emit("")
        self.busy_changed.emit(False)
        self.conversation_changed.emit()

    # slots
    def _on_bridge_request_submitted(self, request_id: int, prompt_tokens: int) -> None:
        if request_id == self.request_id:      # the context indicator counts it now
            msg = self.model.message(self._row)
            msg.prompt_tokens = max(prompt_tokens - self._continued[1], 0)
            self.model.replace(self._row, msg)

    def _on_bridge_token_received(self, request_id: int, text: str, num_tokens: int) -> None:
        if request_id != self.request_id:
            return
        msg = self.model.message(self._row)
        if msg.ttft_s is None:
            msg.ttft_s = time.perf_counter() - self._t_sent
        self.model.append_text(self._row, text, num_tokens)

    def _on_bridge_request_finished(self, request_id, reason, stats, text, error) -> None:
        if request_id != self.request_id:
            return
        if text:
            self.model.message(self._row).content = self._continued[0] + text
        self._end(_FINAL_STATE.get(reason, MessageState.DONE), stats, error)

    def _on_bridge_load_progress(self, fraction: float, message: str) -> None:
        if self.waiting_for_model:
            self.waiting_changed.emit(f"Loading the model… {fraction:.0%}"
                                      + (f" · {message}" if message else ""))

    def _on_bridge_model_loaded(self, _name: str) -> None:
        self.max_context_changed.emit()
        self._warm_schema()
        if not self.waiting_for_model:
            return
        self.waiting_for_model = False
        msg = self.model.message(self._row)
        msg.model = self._bridge.model_name
        try:
            rid = self._submit(self._row)     # the conversation before the waiting reply
        except (TandemError, ValueError) as exc:
            self._end(MessageState.ERROR, None, str(exc))
            return
        self._started(rid)
        self.waiting_changed.emit("")

    def _on_bridge_load_failed(self, message: str) -> None:
        if self.waiting_for_model:
            self._end(MessageState.ERROR, None, f"the model did not load: {message}")

    def _on_save_timeout(self) -> None:
        if self._row is not None:
            self._store.update_message(self.model.message(self._row))
