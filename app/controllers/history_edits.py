"""The verbs that change a conversation's history, mixed into ChatSession: Continue
a reply cut short, Regenerate an answer, Edit and resend a question, and step
through the versions those keep ("‹ 1/2 ›"), each with the turns that followed it
(app/storage/message_branches.py). They use the session's own request plumbing
(_abandon, _generate, _truncate, _add, _started)."""
from __future__ import annotations

import time

from app.storage.message import CONTINUABLE, MessageState
from app.storage.message_branches import with_branch, with_branch_kept, with_edit
from app.storage.message_versions import num_versions
from engine.errors import TandemError


class HistoryEdits:
    def continue_reply(self, row: int) -> bool:
        """Carry on the stopped (or cut) last answer at `row` from where it ended: the
        model reads the answer so far as its own and goes on; the text joins it."""
        msg = self.model.message(row)
        if (self.busy or row != self.model.last_row() or msg.role != "assistant"
                or msg.state not in CONTINUABLE or not msg.content):
            return False
        try:
            rid = self._bridge.submit_continuation(
                self._prompt(row), msg.content, self._params(msg.content))
        except (TandemError, ValueError) as exc:
            self.error.emit(str(exc))
            return False
        self._row, self._t_sent = row, time.perf_counter()
        self._continued = (msg.content, msg.num_tokens or 0)
        msg.state, msg.error = MessageState.STREAMING, ""
        self._store.update_message(msg)
        self.model.replace(row, msg)
        self._started(rid)
        self.busy_changed.emit(True)
        return True

    def regenerate(self, row: int) -> bool:
        """A new answer at `row`, kept beside the earlier ones ("< 1/2 >"); the turns
        after `row` were built on the old answer, so they go with it (its branch)."""
        if self.model.message(row).role != "assistant":
            return False
        self._abandon()
        answer, tail = self.model.message(row), self.model.messages()[row + 1:]
        kept = with_branch_kept(answer, tail)
        self._store.update_message(kept)
        self.model.replace(row, kept)
        self._truncate(row + 1)
        if self._generate(row):
            return True
        # Nothing was submitted (no model, a prompt too long): as it was.
        self._store.update_message(answer)
        self.model.replace(row, answer)
        for turn in tail:
            self._add(turn.copy(id=None))
        return False

    def select_version(self, row: int, index: int) -> bool:
        """Show version `index` of the message at `row`, with the turns that followed
        it (its branch); the next turn builds on it."""
        msg = self.model.message(row)
        if self.busy or not 0 <= index < num_versions(msg):
            return False
        msg, branch = with_branch(msg, index, self.model.messages()[row + 1:])
        self._store.update_message(msg)
        self.model.replace(row, msg)
        self._truncate(row + 1)
        for turn in branch:
            self._add(turn)
        self.conversation_changed.emit()
        return True

    def edit_and_resend(self, row: int, text: str) -> bool:
        """A new version of the user message at `row` with `text`, answered again; the
        old version keeps the turns that followed it ("‹ 1/2 ›" brings them back)."""
        if self.model.message(row).role != "user" or not text.strip():
            return False
        self._abandon()
        edited = with_edit(self.model.message(row), text.strip(),
                           self.model.messages()[row + 1:])
        self._store.update_message(edited)
        self.model.replace(row, edited)
        self._truncate(row + 1)
        return self._generate()
