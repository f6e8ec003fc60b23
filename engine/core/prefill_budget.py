"""How many prompt tokens a step may read while other conversations stream.

The policy (docs/ENGINE.md, "Reading a prompt while others stream"): every streaming
conversation keeps at least a reading pace, a step of at most 1 / min_stream_tok_s
seconds; prompt reading gets all the time above the calm decode step (a step with no
prompt in it) up to that floor:

    tokens = (floor step - calm step) x prompt tokens per second

rounded DOWN to a chunk length of engine.core.shapes.py. With mixed forwards
(EngineConfig.mixed_forward, the default) a step with decode rows and a chunk is ONE
forward, so the time it takes beyond a calm step is the chunk's marginal cost inside
a forward that was running anyway (its extra token-wise work, the extra experts its
tokens route to, its own attention and recurrence), not a second forward with its own
fixed cost: exactly the "time above the calm step" the formula spends, so learning
the prompt rate from mixed steps fits it better than with two forwards (where each
mixed step also paid a second forward's fixed cost and the rate came out low). Where
that marginal cost is far from linear in the tokens (a small chunk nearly free beside
a launch-bound decode step), the rate learned from a small chunk overestimates a large
one's; the next step's measurement corrects it (moving average). Both rates are
measured from the engine's own recent steps (moving averages), here and nowhere else:
the scheduler only receives the token count and stays deterministic.

Degraded mode: where even one smallest chunk beside a calm step overruns the floor (a
CPU, or a batch whose calm step is itself slower than the floor), the floor cannot
hold. The step may then be max(floor, calm x (1 + max_decode_slowdown)), and the
prompt still gets at least the smallest chunk so that a new conversation's wait stays
bounded (prompt length / MIN_CHUNK steps). The allowance says the mode is active; the
step loop puts it in every StepEvent.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.shapes import MIN_CHUNK, round_down

WARMUP_TOKENS = 64  # before anything is measured, read this much beside a decode
_ALPHA = 0.2        # weight of the newest step in the moving averages


@dataclass(frozen=True)
class Allowance:
    tokens: int              # padded prompt tokens the next step may read
    degraded: bool = False   # the reading-pace floor cannot hold: bounded slowdown instead


class PrefillBudget:
    def __init__(self, max_chunk: int, min_stream_tok_s: float, max_slowdown: float):
        """min_stream_tok_s 0: no floor, every step reads a whole chunk."""
        self.max_chunk = max_chunk
        self.min_stream_tok_s = min_stream_tok_s
        self.max_slowdown = max_slowdown
        self.decode_s: float | None = None      # seconds of a calm (decode-only) step
        self.prefill_tok_s: float | None = None  # prompt tokens per second, alone

    def allowance(self, decoding: bool) -> Allowance:
        """The next step's prompt tokens; the whole chunk when nobody is streaming."""
        if not decoding or self.min_stream_tok_s <= 0:
            return Allowance(self.max_chunk)
        if self.decode_s is None or self.prefill_tok_s is None:
            return Allowance(min(self.max_chunk, WARMUP_TOKENS))
        floor_s = 1.0 / self.min_stream_tok_s
        tokens = round_down(self._tokens_within(floor_s), self.max_chunk)
        if tokens:
            return Allowance(tokens)
        step_s = max(floor_s, self.decode_s * (1 + self.max_slowdown))
        tokens = round_down(self._tokens_within(step_s), self.max_chunk)
        return Allowance(max(tokens, min(MIN_CHUNK, self.max_chunk)), degraded=True)

    def tokens(self, decoding: bool) -> int:
        return self.allowance(decoding).tokens

    def _tokens_within(self, step_s: float) -> int:
        """Prompt tokens that fit in a step of step_s beside a calm decode step."""
        return max(0, int((step_s - self.decode_s) * self.prefill_tok_s + 1e-6))

    def observe(self, seconds: float, decode_rows: int, prefill_tokens: int) -> None:
        """Learn from a finished step (its cadence, in seconds)."""
        if seconds <= 0:
            return
        if decode_rows and not prefill_tokens:
            self.decode_s = _mix(self.decode_s, seconds)
        elif prefill_tokens and not decode_rows:
            self.prefill_tok_s = _mix(self.prefill_tok_s, prefill_tokens / seconds)
        elif prefill_tokens and self.decode_s is not None and seconds > self.decode_s:
            # A mixed step: the time beyond a calm decode step went to the prompt.
            rate = prefill_tokens / (seconds - self.decode_s)
            self.prefill_tok_s = _mix(self.prefill_tok_s, rate)


def _mix(old: float | None, new: float) -> float:
    return new if old is None else (1 - _ALPHA) * old + _ALPHA * new
