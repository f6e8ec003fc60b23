"""Per-request text output: incremental detokenization, EOS, stop strings, limits."""
from __future__ import annotations

from engine.sampling_params import SamplingParams


class OutputStream:
    """Feeds sampled ids through the detokenizer and decides when a request ends.

    Text that could be the start of a stop string is held back until it is
    known not to be one, so a stop string never reaches the user.
    """

    def __init__(self, detokenizer, eos_ids: frozenset[int], sampling: SamplingParams,
                 max_total_tokens: int):
        self._detok = detokenizer
        self._eos = eos_ids
        self._stop = sampling.stop
        self._holdback = max((len(s) for s in self._stop), default=1) - 1
        self._max_tokens = sampling.max_tokens
        self._max_total = max_total_tokens
        self.text = ""          # everything decoded so far (stop string excluded)
        self._emitted = 0       # chars of text already handed out
        self.finish_reason: str | None = None

    def add(self, token_id: int, num_generated: int, num_total: int) -> str:
        """Take one sampled token; return the text delta that may be shown now."""
        if token_id in self._eos:
            self.finish_reason = "stop"
            self.text += self._held_back()
            return self._release(final=True)
        self.text += self._detok.add(token_id)
        if self._stop and self._cut_at_stop():
            self.finish_reason = "stop"
        elif num_generated >= self._max_tokens or num_total >= self._max_total:
            self.finish_reason = "length"
            self.text += self._held_back()
            if self._stop:
                self._cut_at_stop()
        return self._release(final=self.finish_reason is not None)

    def finish(self) -> str:
        """The request ended from outside (cancel, error): release held-back text."""
        self.text += self._held_back()
        return self._release(final=True)

    def _held_back(self) -> str:
        # The detokenizer holds back text that ends in U+FFFD: a character still waiting
        # for its last bytes, which decodes as exactly one U+FFFD. A reply that ends there
        # (stop, length, cancel mid-emoji) drops it rather than end in a broken character.
        tail = self._detok.flush()
        return tail[:-1] if tail.endswith("\ufffd") else tail

    def _cut_at_stop(self) -> bool:
        start = max(0, self._emitted - self._holdback - 1)
        hits = [i for i in (self.text.find(s, start) for s in self._stop) if i >= 0]
        if hits:
            self.text = self.text[:min(hits)]
            return True
        return False

    def _release(self, final: bool) -> str:
        if final:
            end = len(self.text)
        else:
            end = max(self._emitted, len(self.text) - self._holdback)
        delta, self._emitted = self.text[self._emitted:end], end
        return delta
