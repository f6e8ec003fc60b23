"""How many prompt tokens a step may read while other conversations stream.

Reading a prompt chunk in the same step as a decode makes every streaming
conversation wait for it. The budget keeps that wait under a fraction of a
decode step: tokens = slowdown x decode-step seconds x prefill tokens/second,
both measured from the engine's own recent steps (moving averages).
"""
from __future__ import annotations

GRAIN = 16          # budgets are whole multiples of this (fewer distinct shapes)
WARMUP_TOKENS = 64  # before anything is measured, read this much beside a decode
_ALPHA = 0.2        # weight of the newest step in the moving averages


class PrefillBudget:
    def __init__(self, max_chunk: int, slowdown: float):
        self.max_chunk = max_chunk
        self.slowdown = slowdown
        self.decode_s: float | None = None      # seconds of a decode-only step
        self.prefill_tok_s: float | None = None  # prompt tokens per second, alone

    def tokens(self, decoding: bool) -> int:
        """The budget for the next step; the whole chunk when nobody is streaming."""
        if not decoding:
            return self.max_chunk
        if self.decode_s is None or self.prefill_tok_s is None:
            return min(self.max_chunk, WARMUP_TOKENS)
        allowed = int(self.slowdown * self.decode_s * self.prefill_tok_s + 1e-6) // GRAIN * GRAIN
        # At least one grain per step, so a new prompt's wait stays bounded: where a grain
        # costs more than the allowed slowdown (a CPU backend, where a prompt token costs
        # as much as a decode row), the streams slow more than the fraction.
        return max(GRAIN, min(self.max_chunk, allowed))

    def observe(self, seconds: float, decode_rows: int, prefill_tokens: int) -> None:
        """Learn from a finished step (its cadence, in seconds)."""
        if seconds <= 0:
            return
        if decode_rows and not prefill_tokens:
            self.decode_s = _mix(self.decode_s, seconds)
        elif prefill_tokens and not decode_rows:
            self.prefill_tok_s = _mix(self.prefill_tok_s, prefill_tokens / seconds)
        elif prefill_tokens and self.decode_s is not None and seconds > self.decode_s:
            # A mixed step: the time beyond a plain decode step went to the prompt.
            rate = prefill_tokens / (seconds - self.decode_s)
            self.prefill_tok_s = _mix(self.prefill_tok_s, rate)


def _mix(old: float | None, new: float) -> float:
    return new if old is None else (1 - _ALPHA) * old + _ALPHA * new
