"""What a step beside streaming decodes is predicted to take, and the step as queued.

On a GPU part of a chunk's cost lands in the step after it (its tail,
engine/core/chunk_tails.py). So a step is predicted as the calm step, plus its own
chunk's cost less that chunk's tail (it lands in the next step), plus the tail of the
chunk in flight before it (it lands in this one, whatever this one reads). A chunk is
priced and read at the length its forward runs at: padded up where the runner pads
chunks (runner.pads_to_fixed_shapes), so any other length costs that one.

The step loop plans step n+1 before it reads step n back, so each step queued is kept as
predicted (QueuedStep) until it is observed: PrefillBudget counts the steps in flight at
their predictions, and reads each step against its own.

Plain Python (no mlx, no clock): PrefillBudget gives it the cost line and the calm step.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.chunk_tails import ChunkTails
from engine.core.mixed_step_cost import CostLine, MixedStepCost
from engine.core.shapes import chunk_lengths, padded_chunk


@dataclass(frozen=True)
class QueuedStep:
    """A step queued on the device, as predicted when it was (PrefillBudget.queued)."""
    step_s: float | None    # its seconds (None: no decode rows in it, or nothing known)
    tokens: int             # prompt tokens it reads
    extra_s: float          # its predicted seconds above the calm step
    measured: bool          # its length had been measured: predicted from itself
    degraded: bool          # chosen in degraded mode
    behind: bool = False    # queued behind a step in flight, whose tail may land in it


class StepPredictor:
    def __init__(self, max_chunk: int, pads_chunks: bool, tails: ChunkTails):
        """pads_chunks: the runner pads a chunk up to a length of the set, so any other
        length costs that one. tails: what part of a chunk's cost lands in the next step."""
        self.max_chunk = max_chunk
        self.pads_chunks = pads_chunks
        self.tails = tails

    def predict(self, decode_rows: int, prefill_tokens: int, calm_s: float | None,
                line: CostLine | None, in_flight: Sequence[QueuedStep], mixed: MixedStepCost,
                degraded: bool) -> QueuedStep:
        """A step's prediction as it is queued: after the steps already in flight. mixed:
        the chunk costs measured (a length measured is predicted from itself); degraded:
        the step was chosen in degraded mode."""
        behind = bool(in_flight)
        if not decode_rows or calm_s is None or (prefill_tokens and line is None):
            return QueuedStep(None, prefill_tokens, 0.0, False, False, behind)
        pending_s = self.pending_tail_s(line, in_flight) if line else 0.0
        if not prefill_tokens:
            return QueuedStep(calm_s + pending_s, 0, 0.0, True, False, behind)
        length = self.reading_length(prefill_tokens)
        extra_s = line.extra_s(length or prefill_tokens)
        return QueuedStep(calm_s + pending_s + self.own_s(prefill_tokens, line),
                          prefill_tokens, extra_s, bool(length and mixed.count(length)),
                          degraded, behind)

    def step_s(self, calm_s: float, prefill_tokens: int, line: CostLine,
               in_flight: Sequence[QueuedStep]) -> float:
        """Seconds of a step reading prefill_tokens beside the calm step's decode rows,
        planned now: after the steps in flight."""
        return calm_s + self.pending_tail_s(line, in_flight) + self.own_s(prefill_tokens, line)

    def tail_s(self, prefill_tokens: int, line: CostLine) -> float:
        """The part of a chunk's cost that lands in the step after it (chunk_tails.py)."""
        length = self.reading_length(prefill_tokens)
        return self.tails.tail_s(length, line.extra_s(length)) if length else 0.0

    def own_s(self, prefill_tokens: int, line: CostLine) -> float:
        """The part of a chunk's cost in its own step (above the calm step): all of it
        for a length whose tail was never read. Its tail grown from the shorter ones
        (chunk_tails.py) bounds the next step, not this one: on the H200 a 256-token
        chunk read right after a 128 was predicted at 67 ms, its grown tail taken out of
        its own step, and took 187 ms there (session 16, a max gap of 192 ms)."""
        length = self.reading_length(prefill_tokens) or prefill_tokens
        if self.reading_length(prefill_tokens) and not self.tails.known(length):
            return line.extra_s(length)
        return line.extra_s(length) - self.tail_s(prefill_tokens, line)

    def rate(self, prefill_tokens: int, line: CostLine) -> float:
        """A chunk's tokens per second of its cost (at the length its forward runs at)."""
        length = self.reading_length(prefill_tokens) or prefill_tokens
        return prefill_tokens / max(line.extra_s(length), 1e-9)

    def chunk_in_flight(self, in_flight: Sequence[QueuedStep]) -> int | None:
        """The chunk length the newest step in flight runs at, if it read a chunk beside
        decode rows (its tail lands in the step planned now); else None."""
        q = in_flight[-1] if in_flight else None
        return self.reading_length(q.tokens) if q and q.tokens and q.step_s else None

    def pending_tail_s(self, line: CostLine, in_flight: Sequence[QueuedStep]) -> float:
        """The tail of the newest step in flight: it lands in the step planned now."""
        length = self.chunk_in_flight(in_flight)
        return self.tails.tail_s(length, line.extra_s(length)) if length else 0.0

    def runs_at(self, tokens: int) -> int:
        """The length a forward of `tokens` prompt tokens runs at (pads_chunks)."""
        return padded_chunk(tokens, self.max_chunk) if self.pads_chunks else tokens

    def reading_length(self, tokens: int) -> int | None:
        """The chunk length a mixed step of `tokens` prompt tokens is read as: the length
        its forward runs at (padded up where chunks are padded), if that is a length of
        the set; None for any other (a prompt's rest where chunks are not padded, or
        several prompts' chunks past the longest), whose reading is not kept. Such a
        step is read once and never again, so a one-off in it (a new decode trace while
        streams are admitted: 300 ms on the H200, session 14) cannot be told from its
        cost, and kept at its own length it set the least that every longer chunk was
        predicted at (CostLine.extra_s): each step of the next prompt ran degraded."""
        length = self.runs_at(tokens)
        return length if length in chunk_lengths(self.max_chunk) else None
