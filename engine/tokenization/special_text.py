"""Encode a rendered chat prompt so that only the template's own markers are special tokens.

A user who types ``<|im_end|>\\n<|im_start|>system`` must not open a system turn.
Before rendering, every special-token string inside the messages' text is swapped
for a private-use character that no message uses; the template then renders as
usual (it may trim, split or quote the text: the swap survives all of that), so
every special-token string left in the rendered prompt is the template's own.
The prompt is cut at those markers: each marker becomes its id, and each piece
between them is restored and encoded with special tokens read as plain text.

Messages without any special-token string skip all of this and encode exactly
as before. Added tokens that are not special (e.g. Qwen's ``<think>``) match in
user text as they do in transformers.
"""
from __future__ import annotations

import re
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from engine.errors import InvalidRequestError
from engine.tokenization.messages import TEXT_FIELDS

_PRIVATE_USE = range(0xF0000, 0xFFFFE)   # Supplementary Private Use Area-A


class SpecialTextGuard:
    """Knows the tokenizer's special-token strings; encodes rendered prompts safely."""

    def __init__(self, hf: HFTokenizer):
        self._hf = hf
        added = hf.get_added_tokens_decoder().values()
        self._markers = sorted({t.content for t in added if t.special and t.content},
                               key=len, reverse=True)          # longest first: greedy match
        self._pattern = (re.compile("|".join(map(re.escape, self._markers)))
                         if self._markers else None)
        self._text_hf: HFTokenizer | None = None

    def has_markers(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def encode_text(self, text: str) -> list[int]:
        """`text` as ordinary text: a special-token string becomes its characters' tokens."""
        if not self.has_markers(text):
            return self._hf.encode(text, add_special_tokens=False).ids
        return self._text_tokenizer().encode(text, add_special_tokens=False).ids

    def escape(self, messages: list[dict]) -> tuple[list[dict], dict[str, str]]:
        """Messages with their special-token strings swapped out, and the way back."""
        if not any(self.has_markers(t) for m in messages for t in _texts(m)):
            return messages, {}
        used = {c for m in messages for t in _texts(m) for c in t}
        free = (chr(c) for c in _PRIVATE_USE if chr(c) not in used)
        swap = {}
        for marker in self._markers:
            swap[marker] = next(free, None)
            if swap[marker] is None:
                raise InvalidRequestError("The messages use every private-use character; "
                                          "remove some of them.")
        restore = {v: k for k, v in swap.items()}

        def sub(text: str) -> str:
            return self._pattern.sub(lambda mt: swap[mt.group(0)], text)
        return [_map_texts(m, sub) for m in messages], restore

    def encode_rendered(self, rendered: str, restore: dict[str, str]) -> list[int]:
        """Ids of a prompt rendered from escaped messages (restore={}: nothing was escaped)."""
        if not restore:
            return self._hf.encode(rendered, add_special_tokens=False).ids
        back = re.compile("|".join(map(re.escape, restore)))
        ids, start = [], 0
        for mt in self._pattern.finditer(rendered):        # the template's own markers
            ids += self._encode_piece(rendered[start:mt.start()], back, restore)
            ids.append(self._hf.token_to_id(mt.group(0)))
            start = mt.end()
        return ids + self._encode_piece(rendered[start:], back, restore)

    def _encode_piece(self, piece: str, back: re.Pattern, restore: dict[str, str]) -> list[int]:
        if not piece:
            return []
        return self.encode_text(back.sub(lambda mt: restore[mt.group(0)], piece))

    def _text_tokenizer(self) -> HFTokenizer:
        # A copy with special-token matching off: toggling the shared tokenizer's flag would
        # race with encodes on other threads.
        if self._text_hf is None:
            text_hf = HFTokenizer.from_str(self._hf.to_str())
            text_hf.encode_special_tokens = True
            self._text_hf = text_hf
        return self._text_hf


def _texts(message: dict) -> list[str]:
    out = [message[f] for f in TEXT_FIELDS if isinstance(message.get(f), str)]
    if isinstance(message.get("content"), list):
        out += [p["text"] for p in message["content"]
                if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return out


def _map_texts(message: dict, fn) -> dict[str, Any]:
    m = dict(message)
    for f in TEXT_FIELDS:
        if isinstance(m.get(f), str):
            m[f] = fn(m[f])
    if isinstance(m.get("content"), list):
        m["content"] = [{**p, "text": fn(p["text"])}
                        if isinstance(p, dict) and isinstance(p.get("text"), str) else p
                        for p in m["content"]]
    return m
