"""The bank: time the streams' steps saved under the floor, spent on a longer chunk.

The floor (engine/core/prefill_budget.py) is a reading pace, a rate; a reader does not see
one gap of 100 ms between gaps of 20 ms (issue 21). Where a chunk has a large fixed cost
(on the H200 ~25 ms for any chunk beside 7 streams: its launches), the longest chunk that
fits the floor (32 tokens there) reads a token ~2x dearer than a 128-token one, which
overruns the floor. With calm steps c, a chunk's cost F + n p above them and steps
averaging the floor f, a share (f - c) / (F + n p) of the steps can read n tokens: the
prompt reads (f - c) / f x n / (F + n p) tokens a second, the most with the longest n,
not with the longest n that fits one step. So each step's time under the floor goes into
a bank (at most BURST x f), and where a longer chunk (a step up to (1 + BURST) x f) reads
a token more than 1 / BANK_GAIN cheaper than the floor's chunk, the policy reads that
chunk when the bank pays for its time over the floor, and otherwise runs a calm step
(tokens 0) that banks: a calm step and a 128-token step in turn on the H200's costs, 1.9x
the prompt's time alone instead of 3.5x (tests/engine/test_prefill_policy.py). Never two
steps over the floor in a row (a reader sees one long gap, then a short one), a prompt
that fits the floor's chunk is read at once (Scheduler.prompt_tokens_left), a prompt
waits at most MAX_BANKING calm steps in a row (then the floor's chunk), and without
a fixed cost (every chunk the same price a token) nothing changes: the floor's chunk,
every step.

The step loop plans step n+1 before it reads step n back, so the bank is known one step
late: the steps queued and not yet read back count at their predictions (ahead).

Plain Python (no mlx, no clock): PrefillBudget feeds it the steps' seconds and asks it
which chunk to read.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from engine.core.step_predictions import QueuedStep

# A step may last up to (1 + BURST) x the floor where the streams' earlier steps came in
# under it; the bank holds at most BURST x the floor. Below 1 (at most 2x the floor,
# issue 21's max gap) with room for a step that overruns its prediction.
BURST = 0.75
BANK_GAIN = 0.9     # a banked chunk must read this much faster per token than the floor's
MAX_BANKING = 3     # calm steps in a row a waiting prompt may give up before reading anyway


class ReadingBank:
    def __init__(self):
        # Seconds the streams' steps came in under the floor (the bank), in
        # [0, BURST x floor]: spent by a banked step, refilled by calm ones.
        self.bank_s = 0.0
        self._last_over_floor = False   # the last step with decode rows took > the floor
        self._banking = 0               # calm steps in a row given to the bank

    def after_step(self, seconds: float, floor_s: float) -> None:
        """A step with decode rows took `seconds`: its time under the floor is banked."""
        # Not below 0: a step that overran its prediction (a first shape compiling)
        # is not paid back by the prompt waiting longer.
        self.bank_s = min(BURST * floor_s, max(0.0, self.bank_s + floor_s - seconds))
        self._last_over_floor = seconds > floor_s

    def ahead(self, floor_s: float, in_flight: Iterable[QueuedStep]) -> tuple[float, bool]:
        """(the bank, whether the last step with decode rows is over the floor) once the
        steps in flight end as predicted."""
        bank_s, over_floor = self.bank_s, self._last_over_floor
        for q in in_flight:
            if q.step_s:
                # a length not measured yet may take anything: over the floor, banking nothing
                step_s = q.step_s if q.measured else max(q.step_s, floor_s + 1e-9)
                bank_s = min(BURST * floor_s, max(0.0, bank_s + floor_s - step_s))
                over_floor = step_s > floor_s
        return bank_s, over_floor

    @staticmethod
    def ceiling_s(floor_s: float, overrun: float) -> float:
        """The longest a banked step may be predicted at: (1 + BURST) x the floor, and at
        most twice the floor (issue 21's max gap) after the overrun the recent steps
        showed (PrefillBudget.overrun)."""
        return min((1 + BURST) * floor_s, 2 * floor_s / overrun)

    def choose(self, floor_chunk: int, banked_chunk: int, over_s: float, floor_s: float,
               room_s: float, in_flight: Iterable[QueuedStep]) -> int:
        """banked_chunk where the bank, once the steps in flight end, pays for its over_s
        seconds over the floor and the last step was not over it (never two in a row);
        else 0, a calm step that banks (room_s: what one banks, the floor less the calm
        step), or floor_chunk where the prompt would wait more than MAX_BANKING of them."""
        bank_s, over_floor = self.ahead(floor_s, in_flight)
        if not over_floor and over_s <= bank_s:                   # never two in a row
            self._banking = 0
            return banked_chunk
        calm_steps = math.ceil(max(0.0, over_s - bank_s) / room_s)
        if self._banking >= MAX_BANKING or calm_steps > MAX_BANKING:
            # The bank fills too slowly (a calm step near the floor), or not as
            # predicted: the floor's chunk now rather than a prompt left waiting.
            self._banking = 0
            return floor_chunk
        self._banking += 1
        return 0

    def no_prompt_waits(self) -> None:
        """No prompt waits: a new one starts afresh, with no calm steps given up yet."""
        self._banking = 0
