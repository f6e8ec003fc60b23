"""Streaming token ids -> text without ever emitting half a character.

Byte-level BPE tokens are byte sequences: an emoji or CJK character can span
two to four tokens, and decoding a prefix that ends mid-character yields
U+FFFD. We hold text back while the decoded tail ends in U+FFFD.

Each step decodes only a short window (a few already-emitted tokens as left
context plus the pending ones), so the cost per token is O(1) however long
the reply grows. The left context matters: decoders such as Metaspace strip a
leading space from the first token, so the delta is
decode(context + pending) - decode(context), never decode(pending) alone.

Invalid bytes (a stray continuation byte) end in U+FFFD forever, so after
_MAX_PENDING held ids we emit anyway, but only up to a *stable* cut: one that
leaves at least three pending ids (an unfinished UTF-8 character is at most
three bytes, so it lies wholly after the cut) and whose decode is a prefix of
the whole window's. Emitting up to the window's end instead would put the
first bytes of a still-unfinished character into the context, and the
character would be lost when it completes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

_REPLACEMENT = "\ufffd"
_NUM_CONTEXT = 4       # emitted tokens kept as left context for the next delta
_MAX_PENDING = 8       # a UTF-8 char is <= 4 bytes; beyond this the bytes are truly invalid
_MAX_UNFINISHED = 3    # bytes (so at most ids) of a UTF-8 char still waiting for its last byte


class _Decoder(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """Feed ids one at a time with `add`; call `flush` at the end of the stream.

    The concatenation of every `add` and the final `flush` equals
    `tokenizer.decode(all_ids, skip_special_tokens)`.
    """

    def __init__(self, tokenizer: _Decoder, skip_special_tokens: bool = False):
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids: list[int] = []     # window: context ids, then pending ids
        self._num_context = 0         # how many of self._ids were already emitted
        self._context_text = ""       # decode(self._ids[:self._num_context])

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special)

    def add(self, token_id: int) -> str:
        """Append one id; return the text it completes (possibly "")."""
        self._ids.append(int(token_id))
        text = self._decode(self._ids)
        num_pending = len(self._ids) - self._num_context
        if not text.endswith(_REPLACEMENT):
            return self._emit(text, len(self._ids))
        if num_pending < _MAX_PENDING:
            return ""  # mid-character: wait for the bytes that complete it
        return self._emit_stable_prefix(text)

    def flush(self) -> str:
        """Return whatever is still held back (invalid bytes show as U+FFFD) and reset."""
        text = self._decode(self._ids) if len(self._ids) > self._num_context else ""
        delta = self._delta(text) if text else ""
        self._ids, self._num_context, self._context_text = [], 0, ""
        return delta

    def _delta(self, text: str) -> str:
        # decode(context) is a prefix of decode(context + pending) for byte-level and
        # Metaspace decoders alike, because the context ends on a whole character.
        return text[len(self._context_text):]

    def _emit_stable_prefix(self, text: str) -> str:
        """Emit the invalid bytes that can never become a character; keep the rest pending."""
        for cut in range(len(self._ids) - _MAX_UNFINISHED, self._num_context, -1):
            prefix = self._decode(self._ids[:cut])
            if text.startswith(prefix):
                return self._emit(prefix, cut)
        # No stable cut (not seen with byte-level or byte-fallback vocabularies): emit all,
        # so a strange decoder costs some fidelity but never unbounded pending work.
        return self._emit(text, len(self._ids))

    def _emit(self, text: str, cut: int) -> str:
        """Hand out decode(ids[:cut]) past the context; ids[cut:] stay pending."""
        delta = self._delta(text)
        # Slide the window: keep a few emitted ids as context for the next delta.
        emitted, pending = self._ids[:cut], self._ids[cut:]
        context = emitted[-_NUM_CONTEXT:]
        self._ids = context + pending
        self._num_context = len(context)
        self._context_text = self._decode(context)
        return delta
