"""Stand-ins the engine tests share: a grammar that allows a fixed set of ids, and a
tokenizer for models fed token ids directly."""
from __future__ import annotations

import numpy as np


class OnlyIds:
    """A fake grammar: allows a fixed set of ids, records what it was fed."""

    def __init__(self, allowed):
        self.allowed, self.accepted, self.rolled_back = set(allowed), [], 0

    def fill_mask(self, row):
        row[:] = 0
        for i in self.allowed:
            row[i // 32] |= np.int32(np.uint32(1 << (i % 32)).view(np.int32))

    def accept(self, token_id):
        self.accepted.append(token_id)

    def rollback(self, n):
        self.rolled_back += n
        del self.accepted[-n:]


class IdTokenizer:
    """Prompts are token ids already; replies are not turned into text."""
    eos_token_ids = frozenset()

    def encode_prompt(self, prompt):
        return prompt

    def detokenizer(self, skip_special_tokens=False):
        return _Silent()


class _Silent:
    def add(self, token_id):
        return ""

    def flush(self):
        return ""
