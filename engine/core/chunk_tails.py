"""Where a chunk's device time lands: in its own step, and in the next one (its tail).

The step loop queues step n+1 before it reads step n back (engine/core/step_loop.py),
so on a GPU the part of a chunk's device work past the host's queuing of it ends
inside the next step, whatever that step reads. On the H200 (session 15, 7 streams, a
14 ms calm step) a 64-token step took ~55 ms and the calm step after it ~22; a
128-token one ~64 and then ~43; a 256-token one ~87 and then ~78.

A chunk's cost (engine/core/mixed_step_cost.py) is both parts together: it is what
sets the prompt's pace. What the streams see is each step. Predicted as one step, a
128-token chunk (~105 ms over two steps) did not fit the 67 ms floor although each of
its steps did, and the policy read 64-token chunks between calm steps: 64 tokens per
~75 ms instead of 128 per ~107 (TTFT 2.2-2.5x alone instead of ~1.6x). And a mixed step
right after another carries the first one's tail: kept as its own cost, a 32-token
chunk read after a 64-token one was priced above 64 tokens.

So each length's tail is learned from the calm steps that carry it (their seconds over
the calm step; the median of the recent few, as for the costs), and a chunk's step is
predicted as its cost less its tail plus the tail of the step before it. A length
whose tail was never read has at least its shorter neighbour's in proportion (none
where no shorter one was read: its whole cost lands in its own step). Its first
chunk is followed by a calm step, which reads the tail; and a mixed step right after a
chunk whose tail is unknown is no reading at all. Session 15's first prompt in each
process read its first chunks back to back: each step held the one before's tail, 128
tokens were priced at ~100 ms, then 64 and 32 as dear, and the policy read 16-token
chunks in 55 ms steps (0.3 tokens a ms against 1.2 for 128 tokens and a calm step).
"""
from __future__ import annotations

import statistics

RECENT = 5      # tail readings of a length whose median predicts it


class ChunkTails:
    def __init__(self):
        self._recent: dict[int, list[float]] = {}
        self._by_rows: dict[int | None, dict[int, list[float]]] = {}

    def switch_batch(self, rows: int | None, new_rows: int) -> None:
        """The calm step is now of new_rows decode rows, no longer of `rows`: the tails
        read beside new_rows take over (each batch size keeps its own, as the costs do:
        the streams' admission read them beside fewer rows)."""
        self._by_rows[rows] = self._recent
        self._recent = self._by_rows.setdefault(new_rows, {})

    def observe(self, length: int, tail_s: float) -> None:
        """A calm step right after a chunk of `length` took tail_s over the calm step."""
        self._recent[length] = (self._recent.get(length, []) + [max(tail_s, 0.0)])[-RECENT:]

    def known(self, length: int) -> bool:
        """Whether a tail of this length was ever read."""
        return length in self._recent

    def most_s(self, length: int, cost_s: float) -> float:
        """The most of this length's recent tails (a length not read yet: its predicted
        tail), never more than its cost: what a chunk's reading may carry for its tail
        before the step after it is read (PrefillBudget._provisional_tail_s)."""
        recent = self._recent.get(length)
        return min(max(recent), cost_s) if recent else self.tail_s(length, cost_s)

    def tail_s(self, length: int | None, cost_s: float) -> float:
        """Seconds of a chunk of `length` (cost_s in all) that land in the next step. A
        length not read yet: the longest shorter one's, grown along the line through the two
        longest read, and at least in proportion to the tokens (the host's part of a
        chunk grows slower than the device's, so a tail grows faster than its tokens: 7,
        28 and 64 ms for 64, 128 and 256 tokens on the H200). Taken as none, a banked
        512-token chunk (132 ms) was followed by a 147 ms calm step (session 15)."""
        if not length:
            return 0.0
        recent = self._recent.get(length)
        if recent:
            return min(statistics.median_low(recent), cost_s)
        known = sorted((n, statistics.median_low(r)) for n, r in self._recent.items()
                       if n < length)
        if not known:
            return 0.0
        n1, t1 = known[-1]
        slope = t1 / n1
        if len(known) > 1:          # along the two longest, where that climbs faster
            n0, t0 = known[-2]
            slope = max(slope, (t1 - t0) / (n1 - n0))
        return min(t1 + (length - n1) * slope, cost_s)
