"""What a mixed step's time says about its chunk's cost, and how far it overran.

A mixed step's reading is its seconds above the calm step, less the tail of a chunk
right before it (that goes to the earlier chunk's reading), plus its own tail as far as
it can be told yet (provisional: the step after it is in flight; charge_tail settles
it), kept at the length its forward runs at (StepPredictor.reading_length) in the costs
beside the batch the calm step is of (engine/core/calm_rows.py; each batch size seen
keeps its own). Not every reading is believed as it comes:

- A length's first reading that comes out above twice what was predicted for it is
  read once more before it is believed (the lower reading counts): a new shape's first
  step on a GPU can include compiling its kernels, and one such reading, taken as the
  cost, sent the H200 into degraded mode with 256-token chunks at 2.3x the floor
  although 32-token chunks fit it (issue 21; tests/engine/test_prefill_policy.py
  reproduces it). Meanwhile no chunk that long is planned (held; ChunkChoice).
- A step far over its prediction is a one-off, not a reading
  (engine/core/one_off_steps.py).
- A calm step right after a mixed one carries the end of the chunk's device work (its
  tail): that goes to the chunk's reading (charge_tail), never to the calm step.

Each mixed step at a length measured before also keeps how far it overran its
prediction (actual / predicted): the spread that the banked steps' cap and the degraded
mode's bound allow for (overrun, bias).

Plain Python (no mlx, no clock): PrefillBudget feeds it the mixed steps it reads back.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.mixed_step_cost import MixedStepCost
from engine.core.one_off_steps import OneOffSteps, is_one_off
from engine.core.step_predictions import QueuedStep

OVERRUN_STEPS = 16  # recent mixed steps whose overrun of their prediction is kept


@dataclass
class ObservedChunk:
    """A mixed step as observed: where its reading went, so that its tail can follow."""
    length: int | None          # the chunk length its reading is kept at (None: nowhere)
    seconds: float              # its cadence
    predicted_s: float | None   # its prediction, where its overrun was kept
    held: bool                  # its reading is the held one, not yet in the cost line
    tail_s: float = 0.0         # its predicted tail (the part of its cost in the next step)
    runs_at: int | None = None  # the chunk length its forward ran at: whose tail it has
    # The tail already in its reading until the step after it says what it was (settled
    # by charge_tail): the step after a chunk is queued before the chunk is read back,
    # so the policy plans one step with the chunk read and its tail not yet
    provisional_s: float = 0.0


class ChunkReadings:
    def __init__(self):
        self.mixed = MixedStepCost()     # beside the batch the calm step is of
        self._costs: dict[int | None, MixedStepCost] = {}   # beside each batch size seen
        # (tokens, seconds above the calm step) of a surprising first reading, kept out of
        # the cost line until the second comes: with a step in flight, the step planned
        # between would otherwise read a compile stall as the length's cost (degraded mode)
        self.held: tuple[int, float] | None = None
        # actual / predicted seconds of recent mixed steps at a length measured before:
        # how far a step overruns what it was chosen by (a GPU's steps vary by ~1.4x)
        self._overruns: list[float] = []
        # The last step observed, if it read a chunk beside decode rows: a calm step right
        # after it may carry the chunk's tail (charge_tail)
        self._last_mixed: ObservedChunk | None = None
        # Steps far over their prediction are not readings (engine/core/one_off_steps.py):
        # nor are their overruns the steps' spread (the banked cap, the bias)
        self._one_offs = OneOffSteps()

    def switch_batch(self, rows: int | None, new_rows: int) -> None:
        """The calm step is now of new_rows decode rows, no longer of `rows`: the chunk
        costs beside new_rows take over (each size keeps its own), and a held reading,
        read beside the old size, is dropped."""
        self._costs[rows] = self.mixed
        self.held = None
        self.mixed = self._costs.setdefault(new_rows, MixedStepCost())

    def take_last_mixed(self) -> ObservedChunk | None:
        """The step observed before this one, if it read a chunk beside decode rows: its
        tail may be in this one. Asked once for each step observed."""
        last_mixed, self._last_mixed = self._last_mixed, None
        return last_mixed

    def observe(self, q: QueuedStep, length: int | None, extra_s: float, seconds: float,
                prefill_tokens: int, tail_s: float, runs_at: int | None,
                provisional_s: float = 0.0) -> bool:
        """A mixed step reading prefill_tokens, queued as q, took `seconds`, extra_s of
        them above the calm step less the tail before it: a reading of `length` (None: no
        reading kept), with provisional_s more for its own tail until the step after it
        settles that (charge_tail). tail_s: its predicted tail; runs_at: the length its
        forward ran at. True where its reading is held until a second one (a surprising
        first)."""
        # A held reading lasts until the next mixed step: its second reading, or (a
        # prompt that ended short of the length, another length planned first) it
        # is dropped, never left to hold the chunk down, and never believed alone:
        # believed, one stall (a new decode trace while streams were admitted) was
        # the least any chunk was predicted at (the H200, session 14: 3.4 s).
        held, self.held = self.held, None
        if held and held[0] != length:
            held = None
        kept = q.step_s if q.step_s and q.measured and length else None
        readings = [extra_s]
        if kept:                        # predicted from its own length (so one of the set)
            readings = self._one_offs.readings(length, extra_s, seconds, kept)
            if not readings:
                length = None           # a one-off: nor a reading of its length
        extra_s += provisional_s
        readings = [r + provisional_s for r in readings]
        if is_one_off(seconds, kept):
            kept = None                 # a one-off, not the steps' spread
        if kept:                        # its noise
            self._overruns = (self._overruns + [seconds / kept])[-OVERRUN_STEPS:]
        if length is None:
            self.mixed.skip()           # an odd length: no reading, but the others age
        elif (q.step_s and not held and not self.mixed.count(length)
                and q.tokens == prefill_tokens and extra_s > 2 * q.extra_s):
            self.held = (length, extra_s)      # read it again before believing it
        elif held:                                     # of two readings, the lower counts
            self.mixed.observe(length, min(extra_s, held[1]))
        else:
            for reading in readings:
                self.mixed.observe(length, reading)
        self._last_mixed = ObservedChunk(length, seconds, kept, self.held is not None,
                                         tail_s, runs_at, provisional_s)
        return self.held is not None

    def charge_tail(self, chunk: ObservedChunk, tail_s: float, measured: bool = True) -> None:
        """A calm step right after a mixed one took tail_s over the calm step: the end of
        the chunk's device work, not a calm reading. The step loop queues step n+1
        before it reads step n back, so a chunk whose device time outlasts the host's
        queuing of it finishes inside the next step (the H200, session 13: a 256-token
        chunk's step took 83 ms and the calm one after it 76, against 14; its cost,
        ~130 ms above the calm step, is its alone time). Read as calm steps, such tails
        took the calm estimate from 14 to ~60 ms: nothing fit the floor any more, and the
        degraded mode read a 496-token chunk in 328 ms. So the tail goes to the chunk's
        reading (and its overrun), and the calm estimate keeps to calm steps. A step
        after a mixed one that comes in at or under the calm estimate is calm. Not
        measured: the tail of a chunk followed by another, moved from the second's
        reading to the first's (its provisional tail); the overruns stay as they were. The
        reading had its provisional tail already: it takes the difference."""
        more_s = tail_s - chunk.provisional_s
        if chunk.length is None:
            pass                        # a reading not kept: its tail neither
        elif chunk.held and self.held and self.held[0] == chunk.length:
            self.held = (chunk.length, self.held[1] + more_s)
        elif not chunk.held:
            self.mixed.add_to_newest(chunk.length, more_s)
        if chunk.predicted_s and self._overruns and measured:
            predicted_s = chunk.predicted_s + chunk.tail_s     # the two steps, as predicted
            if is_one_off(chunk.seconds + tail_s, predicted_s):
                self._overruns.pop()        # with its tail, a one-off after all
            else:
                self._overruns[-1] = (chunk.seconds + tail_s) / predicted_s

    def overrun(self) -> float:
        """How far recent mixed steps took over their predictions, at the most but one
        (at least 1): the margin a banked step keeps below twice the floor. Not the
        most: on the H200 one step in ~16 comes out 1.7-1.9x its prediction whatever it
        reads (session 15), and the most barred every banked chunk for 16 steps, so the
        policy read 16-token chunks at a third of the pace of a 128-token one and a calm
        step in turn; a banked step's own spike is as likely as any step's."""
        return max([1.0] + sorted(self._overruns)[:-1])

    def bias(self) -> float:
        """How much recent mixed steps overran their predictions on average (at least 1)."""
        return max(1.0, sum(self._overruns) / len(self._overruns)) if self._overruns else 1.0
