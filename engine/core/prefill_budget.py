"""How many prompt tokens a step may read while other conversations stream.

The policy (docs/ENGINE.md, "Reading a prompt while others stream"): every streaming
conversation keeps at least a reading pace, steps of floor = 1 / min_stream_tok_s
seconds on average (one at most (1 + BURST) x the floor, see the bank below); prompt
reading gets all the time above the calm decode step (a step with no prompt in it) up to
that. A mixed step costs

    calm + fixed + tokens x per_token          (engine/core/mixed_step_cost.py)

so the chunk is the longest length of engine/core/shapes.py whose predicted step fits
the floor (engine/core/chunk_choice.py, with the rules that keep it from locking itself
into a small chunk). Both the calm step and the cost line are measured from the engine's
own recent steps, here and nowhere else: the scheduler only receives the token count and
stays deterministic. On a GPU part of a chunk's cost lands in the step after it (its
tail, engine/core/chunk_tails.py): a step is predicted as its own part plus the tail of
the step before it (engine/core/step_predictions.py), and a chunk fits where its own
step fits the floor and its tail fits the next. The calm step and the chunk costs are of
one batch size at a time (engine/core/calm_rows.py); each size seen keeps its own costs.
A mixed step's reading goes to its chunk's cost, held once where it surprises
(engine/core/chunk_readings.py).

The bank (engine/core/reading_bank.py): the floor is a pace, so it holds on average.
Where a chunk has a large fixed cost, a longer chunk than the floor's reads a token much
cheaper; steps under the floor bank their time, and that chunk is read once the bank
pays for its time over the floor, with calm steps (tokens 0) banking in between.

Degraded mode (engine/core/degraded_mode.py): where even one smallest chunk beside a
calm step overruns the floor, the step may take max(floor, calm x (1 + max_slowdown))
and the prompt still reads at least the smallest chunk. The allowance says the mode is
active; the step loop puts it in every StepEvent.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from engine.core.alone_prefill_cost import MIXED_FORWARD_SHARE, AlonePrefillCost
from engine.core.calm_rows import CalmRows
from engine.core.chunk_choice import PROBE_EVERY, WARMUP_TOKENS, ChunkChoice
from engine.core.chunk_readings import ChunkReadings
from engine.core.chunk_tails import ChunkTails
from engine.core.degraded_mode import measures_smallest_first, prompt_bound_s
from engine.core.max_gap import MAX_GAP_FLOORS, whole_bound_s
from engine.core.mixed_step_cost import CostLine, MixedStepCost
from engine.core.one_off_steps import OneOffSteps
from engine.core.reading_bank import BANK_GAIN, BURST, MAX_BANKING, ReadingBank
from engine.core.shapes import DECODE_SIZES, MIN_CHUNK, chunk_lengths, padded_batch
from engine.core.step_predictions import QueuedStep, StepPredictor

# The policy's constants are named here too, where its tests and docs take them from
__all__ = ["Allowance", "PrefillBudget", "BURST", "MAX_BANKING", "MAX_GAP_FLOORS", "PROBE_EVERY",
           "WARMUP_TOKENS"]

_ALPHA = 0.2        # weight of the newest step in the moving averages


@dataclass(frozen=True)
class Allowance:
    tokens: int              # padded prompt tokens the next step may read
    degraded: bool = False   # the reading-pace floor cannot hold: bounded slowdown instead
    # Which rule chose `tokens` (the step's event carries it, so the steps of a GPU run
    # say why each chunk was that long: "floor", "banked", "probe", "calm: ..."; a cut
    # for the max gap adds "capped from N")
    why: str = ""


class PrefillBudget:
    def __init__(self, max_chunk: int, min_stream_tok_s: float, max_slowdown: float,
                 alone_share: float = MIXED_FORWARD_SHARE, pads_chunks: bool = False):
        """min_stream_tok_s 0: no floor, every step reads a whole chunk. alone_share: the
        least share of its alone cost a chunk beside decode rows is predicted at
        (engine/core/alone_prefill_cost.py: OWN_FORWARD_SHARE where a step runs the chunk
        as a forward of its own). pads_chunks: the runner pads a chunk up to a length
        of the set (runner.pads_to_fixed_shapes), so any other length costs that one."""
        self.pads_chunks = pads_chunks
        self.max_chunk = max_chunk
        self.min_stream_tok_s = min_stream_tok_s
        self.max_slowdown = max_slowdown
        self.decode_s: float | None = None      # seconds of a calm (decode-only) step
        self.calm_rows = CalmRows()     # of how many decode rows (engine/core/calm_rows.py)
        self.prefill_tok_s: float | None = None  # prompt tokens per second, alone
        self.alone = AlonePrefillCost(alone_share)   # the least a chunk costs, read alone
        # What mixed steps say their chunks cost, and how far they overran (chunk_readings.py)
        self.readings = ChunkReadings()
        self._last: Allowance | None = None     # the last allowance given
        self._recheck: Allowance | None = None  # a surprising first reading, read again
        self.bank = ReadingBank()   # time under the floor, for a longer chunk (reading_bank.py)
        # Predicted seconds of the steps queued but not yet observed (None: no decode rows
        # in it). The step loop plans step n+1 before it reads step n back, so the bank
        # and the last step's length are known one step late; the policy counts the step
        # in flight at its prediction (queued), or it would read a second banked chunk
        # right after the first (the H200, session 9: two 256-token steps, 105 and 224 ms).
        self._in_flight: list[QueuedStep] = []
        # Calm steps far over the calm estimate are not readings (engine/core/one_off_steps.py)
        self._one_offs = OneOffSteps()
        # What part of a chunk's cost lands in the step after it (engine/core/chunk_tails.py)
        self.tails = ChunkTails()
        self.predictor = StepPredictor(max_chunk, pads_chunks, self.tails)
        self.choice = ChunkChoice(max_chunk, self.predictor, self.readings)

    @property
    def mixed(self) -> MixedStepCost:
        """What a chunk costs beside the batch the calm step is of (ChunkReadings.mixed)."""
        return self.readings.mixed

    @mixed.setter
    def mixed(self, cost: MixedStepCost) -> None:
        self.readings.mixed = cost

    @property
    def bank_s(self) -> float:
        """Seconds the streams' steps came in under the floor (ReadingBank.bank_s)."""
        return self.bank.bank_s

    @bank_s.setter
    def bank_s(self, seconds: float) -> None:
        self.bank.bank_s = seconds

    def allowance(self, decoding: bool, prompt_left: int | None = None) -> Allowance:
        """The next step's prompt tokens; the whole chunk when nobody is streaming.
        prompt_left: the fewest tokens a waiting prompt has left (Scheduler.
        prompt_tokens_left): one that fits the floor's chunk is read now, never banked for."""
        if not decoding or self.min_stream_tok_s <= 0:
            return Allowance(self.max_chunk, why="alone" if not decoding else "no floor")
        allowance = self._recheck or self._allowance(prompt_left)
        self._recheck = None
        allowance = self._within_max_gap(allowance)
        self._last = allowance
        return allowance

    def _within_max_gap(self, allowance: Allowance) -> Allowance:
        """The allowance, or the longest shorter length whose whole predicted cost with
        the calm step fits MAX_GAP_FLOORS floors (never below the smallest chunk; its
        whole cost as engine/core/max_gap.py bounds it); not in degraded mode, where the
        floor does not hold and its own bound applies."""
        line = self.cost_line()
        if allowance.degraded or not allowance.tokens or self.decode_s is None or line is None:
            return allowance
        bound_s = MAX_GAP_FLOORS / self.min_stream_tok_s - self.decode_s

        def fits(n: int) -> bool:
            return whole_bound_s(self.predictor.runs_at(n), line, self.mixed.lengths,
                                 self._alone_per_token_s()) <= bound_s + 1e-9
        if fits(allowance.tokens):
            return allowance
        shorter = [n for n in chunk_lengths(self.max_chunk) if n < allowance.tokens and fits(n)]
        return replace(allowance, tokens=max(shorter, default=min(MIN_CHUNK, allowance.tokens)),
                       why=f"{allowance.why}, capped from {allowance.tokens}")

    def _allowance(self, prompt_left: int | None = None) -> Allowance:
        runs_at = self.predictor.chunk_in_flight(self._in_flight)
        if runs_at and not self.tails.known(runs_at):
            # A chunk in flight whose tail was never read: a calm step after it reads its
            # tail, and the reading of whatever follows it is not spoilt by an unknown
            # tail (chunk_tails.py). Once per length.
            return Allowance(0, why="calm: a tail never read")
        line = self.cost_line()
        if self.decode_s is None or line is None:
            return Allowance(min(self.max_chunk, WARMUP_TOKENS), why="first")
        floor_s = 1.0 / self.min_stream_tok_s
        room_s = floor_s - self.decode_s
        # what fits a step and the one after it (its tail) decides whether the floor holds
        tokens = self.choice.longest_within(room_s, line, prompt_left, follow_s=room_s,
                                            lend_s=BURST * floor_s)
        held = self.readings.held
        if not tokens and held and any(f.tokens == held[0] for f in self._in_flight):
            return Allowance(0, why="calm: a reading read again")
        pending_s = self.predictor.pending_tail_s(line, self._in_flight)
        if tokens and pending_s:
            # The step in flight's tail lands in this step whatever it reads: a chunk
            # beside it (what still fits) must read about as fast a token as the chunk a
            # step without a tail fits, else a calm step takes the tail. On the H200 a
            # 16-token chunk squeezed beside a 128-token one's tail made a floor-long step
            # at a third of the pace: time the streams give and the prompt barely uses.
            free = tokens
            tokens = self.choice.longest_within(room_s - pending_s, line, prompt_left, room_s)
            if tokens and (prompt_left is None or prompt_left > tokens) and (
                    self.predictor.rate(tokens, line)
                    < BANK_GAIN * self.predictor.rate(free, line)):
                tokens = 0
            if not tokens:
                return Allowance(0, why="calm: the tail before")
        if tokens:
            probed = self.choice.probe(tokens, floor_s - self.decode_s, line, False,
                                       self.decode_s, floor_s, self._alone_per_token_s())
            if probed != tokens and self.bank.ahead(floor_s, self._in_flight)[1]:
                probed = tokens             # a probe may overrun: not right after a long step
            if prompt_left == 0:
                self.bank.no_prompt_waits()     # a new prompt starts afresh
            if probed != tokens:
                return Allowance(probed, why="probe")
            if prompt_left is not None and prompt_left <= tokens:
                return Allowance(probed, why="the prompt's rest")
            why = "floor, beside the tail before" if pending_s else "floor"
            return self._banked(tokens, floor_s, line, pending_s, why)
        return self._degraded(floor_s, line, prompt_left)

    def _degraded(self, floor_s: float, line: CostLine, prompt_left: int | None) -> Allowance:
        """Even the smallest chunk overruns the floor (engine/core/degraded_mode.py): the
        smallest chunk until it is measured, then the longest within the mode's bound."""
        self.bank.bank_s = 0.0  # degraded: the floor is not held, nothing to bank
        smallest = min(MIN_CHUNK, self.max_chunk)
        if measures_smallest_first(self.mixed.count(smallest), self.decode_s, floor_s):
            return Allowance(smallest, why="smallest, measured first")
        if not self.mixed.count(smallest):      # the calm step alone overruns
            return Allowance(smallest, degraded=True, why="degraded: the calm step overruns")
        prompt_s = prompt_bound_s(floor_s, self.decode_s, self.max_slowdown, self.bias(),
                                  line.extra_s(smallest))
        chosen = max(self.choice.longest_within(prompt_s, line, prompt_left), smallest)
        tokens = self.choice.probe(chosen, prompt_s, line, True, self.decode_s,
                                   max(floor_s, self.decode_s + prompt_s),
                                   self._alone_per_token_s())
        why = "degraded" if tokens == chosen else "degraded probe"
        if tokens == chosen and not self.pads_chunks:       # no probe: fill the bound
            tokens = self.choice.between(chosen, prompt_s, line, prompt_left)
        return Allowance(tokens, degraded=True, why=why)

    def _banked(self, tokens: int, floor_s: float, line: CostLine, pending_s: float,
                why: str) -> Allowance:
        """The floor's chunk (tokens), or where a fixed cost per chunk makes a longer one
        much cheaper per token (BANK_GAIN), that longer one once the bank affords it, and
        until then no prompt at all (0: a calm step, banking its time under the floor).
        Reading the most tokens per second at an average step of the floor means reading
        the chunk with the most tokens per second of its own cost (reading_bank.py).
        pending_s: the tail of the step in flight, which lands in this one; why: the
        floor's chunk's reason."""
        # A banked step within the bank's ceiling as predicted (ReadingBank.ceiling_s); the
        # step after it (the chunk's tail) within the floor.
        ceiling_s = self.bank.ceiling_s(floor_s, self.overrun())
        best = self.choice.longest_within(ceiling_s - self.decode_s - pending_s, line,
                                          follow_s=floor_s - self.decode_s)
        if best <= tokens or (tokens / max(line.extra_s(tokens), 1e-9)
                              >= BANK_GAIN * best / max(line.extra_s(best), 1e-9)):
            return Allowance(tokens, why=why)
        # its time over the floor
        need_s = self.decode_s + pending_s + self.predictor.own_s(best, line) - floor_s
        chosen = self.bank.choose(tokens, best, need_s, floor_s, floor_s - self.decode_s,
                                  self._in_flight)
        if chosen != best or pending_s:
            return Allowance(chosen, why={0: "calm: banking", best: "banked"}.get(
                chosen, f"{why} (banking waited long enough)"))
        probed = self.choice.probe_unread(best, line, self.decode_s, floor_s,
                                          self._alone_per_token_s())
        return Allowance(probed, why="banked" if probed == best else "probe of a length never read")

    def overrun(self) -> float:
        """How far recent mixed steps took over their predictions, at the most but one
        (ChunkReadings.overrun): the margin a banked step keeps below twice the floor."""
        return self.readings.overrun()

    def bias(self) -> float:
        """How much recent mixed steps overran their predictions on average (at least 1)."""
        return self.readings.bias()

    def queued(self, decode_rows: int, prefill_tokens: int) -> None:
        """The step loop queued a step (observed later, in order): counted at its
        prediction until then, and read against it when it is observed."""
        self._in_flight.append(self._prediction(decode_rows, prefill_tokens))

    def _prediction(self, decode_rows: int, prefill_tokens: int) -> QueuedStep:
        """A step's prediction as it is queued: after the steps already in flight."""
        return self.predictor.predict(
            decode_rows, prefill_tokens, self.decode_s, self.cost_line(), self._in_flight,
            self.mixed, degraded=bool(self._last and self._last.degraded))

    def drop_queued(self) -> None:
        """The steps in flight failed: none of them will be observed."""
        self._in_flight.clear()

    def predicted_s(self, prefill_tokens: int) -> float:
        """Seconds the policy expects a step that reads prefill_tokens beside the decode
        rows to take (0.0: nothing measured yet); the step events carry it, so that a
        chunk's measured cost can be read against the prediction it was chosen by."""
        line = self.cost_line()
        if self.decode_s is None or line is None:
            return 0.0
        return self.predictor.step_s(self.decode_s, prefill_tokens, line, self._in_flight)

    def tokens(self, decoding: bool) -> int:
        return self.allowance(decoding).tokens

    def cost_line(self) -> CostLine | None:
        """What a chunk adds to a calm step: measured from mixed steps, else (before any)
        bounded by the alone prefill rate (no fixed cost assumed); None: nothing known."""
        alone = self._alone_per_token_s()
        line = self.mixed.line(alone, self.alone)
        if line is None and alone is not None:
            return CostLine(0.0, alone, known_slope=True, alone=self.alone)
        return line

    def _alone_per_token_s(self) -> float | None:
        """A prompt token's seconds read alone (no decode rows), if measured."""
        return 1.0 / self.prefill_tok_s if self.prefill_tok_s else None

    def observe(self, seconds: float, decode_rows: int, prefill_tokens: int) -> None:
        """Learn from a finished step (its cadence, in seconds)."""
        # the step's prediction when it was queued (callers that do not queue: as of their
        # last allowance, if they asked for one, and taken to run behind the step before)
        if self._in_flight:
            q = self._in_flight.pop(0)
        elif self._last is not None:
            q = replace(self._prediction(decode_rows, prefill_tokens), behind=True)
        else:
            q = QueuedStep(None, prefill_tokens, 0.0, False, False, behind=True)
        if seconds <= 0:
            return
        if decode_rows and self.min_stream_tok_s > 0:
            self.bank.after_step(seconds, 1.0 / self.min_stream_tok_s)
        last_mixed = self.readings.take_last_mixed()
        # the batch the decode rows run at: padded up where the runner pads (its decode
        # sizes, engine/core/shapes.py), so 5 to 8 rows cost one calm step on a GPU
        batch = (padded_batch(decode_rows, DECODE_SIZES[-1])
                 if self.pads_chunks and decode_rows else decode_rows)
        if not q.behind:
            last_mixed = None       # queued after it was read back: no tail of it here
        if decode_rows and not prefill_tokens:
            tail_s = seconds - self.decode_s if self.decode_s is not None else 0.0
            calm_rows = self.calm_rows.rows     # the size the estimate is of, until now
            if last_mixed is not None and not self.calm_rows.of(batch):
                last_mixed = None       # another batch's calm step: no tail to read in it
            if last_mixed is not None and last_mixed.runs_at:
                self.tails.observe(last_mixed.runs_at, tail_s)
            if last_mixed is not None and tail_s <= 0:
                # no tail after all: its reading drops the provisional one, and this
                # step is a calm reading
                self.readings.charge_tail(last_mixed, 0.0, measured=False)
            if last_mixed is not None and tail_s > 0:
                self.readings.charge_tail(last_mixed, tail_s)
            elif (fresh_s := self.calm_rows.calm(batch, seconds)) is not None:
                # The batch's size changed: so did what a chunk costs beside it (on the
                # CPU, readings beside the two rows of an admission priced 32 tokens at
                # 230 ms beside three, where they took ~140: never read again, they held
                # the chunk at 16 for whole prompts, TTFT 3.5-4.6x alone; session 15).
                # Each size keeps its own costs: conversations come and go, and the
                # sizes come back.
                self.decode_s = fresh_s
                self.readings.switch_batch(calm_rows, batch)
                self.tails.switch_batch(calm_rows, batch)   # and what lands in the next step
            elif self.calm_rows.of(batch):
                for reading in self._one_offs.readings("calm", seconds, seconds, self.decode_s):
                    self.decode_s = _mix(self.decode_s, reading)
        elif prefill_tokens and not decode_rows:
            self.prefill_tok_s = _mix(self.prefill_tok_s, prefill_tokens / seconds)
            self.alone.observe(prefill_tokens, seconds)
        elif prefill_tokens and self.decode_s is not None:
            # A mixed step: the time beyond a calm decode step went to the prompt, less
            # the tail of a chunk right before it, which goes to that chunk's reading.
            extra_s = seconds - self.decode_s
            line = self.cost_line()
            length = runs_at = self.predictor.reading_length(prefill_tokens)
            if not self.calm_rows.of(batch):
                length = None       # beside a batch the calm estimate is not of: no reading
            if last_mixed is not None and last_mixed.runs_at:
                # the tail of the chunk right before: what its reading was given for it
                extra_s -= last_mixed.provisional_s
            tail_s = self.predictor.tail_s(prefill_tokens, line) if line else 0.0
            if (self.readings.observe(q, length, extra_s, seconds, prefill_tokens, tail_s,
                                      runs_at, self._provisional_tail_s(runs_at, extra_s,
                                                                        line))
                    and prefill_tokens == length
                    and not any(f.tokens == length for f in self._in_flight)):
                # Held for a second reading: read again at once where it is a whole chunk
                # and none is in flight; a prompt's padded rest is read again by the next
                # chunk of its length
                self._recheck = Allowance(length, q.degraded, why="read again")
            self.choice.after_mixed_step(prefill_tokens)

    def _provisional_tail_s(self, length: int | None, own_s: float,
                            line: CostLine | None) -> float:
        """The tail a chunk's reading carries until the step after it settles it
        (ChunkReadings.charge_tail). That step is queued before this one is read back,
        so the policy plans once with this chunk read and its tail not yet; priced by
        its own step alone, a 128-token chunk came out at ~36 ms above the calm step
        where it costs ~80, and twice that let a 256-token chunk in. So the reading
        carries what its cost as known (the line's, before this reading) leaves over its
        own step (own_s: its seconds above the calm step less the tail before it), at
        most the longest of its length's recent tails (a length whose tail was never
        read: its predicted tail, chunk_tails.py), and none where no step is in flight
        behind it (nothing can land anywhere). Not the tails' median: on the H200 a
        128-token chunk's own step was ~45 ms (a ~50 ms tail after it) or ~95 (the host
        waiting in its queuing, no tail: session 25), and a median of tails ~0 and ~50
        is right for neither, while the whole cost stays ~80. Not the line alone: where
        nothing spills (the CPU's steps run as they are queued, their tails ~0) a line
        above a step's cost moved phantom seconds from the next step's reading to this
        one, the next length came out cheap, and degraded chunks of 104-152 tokens made
        the streams' steps 4x the calm step (a pipelined CPU run). A chunk right after
        this one takes the same tail out of its own reading. In a scripted pipelined run
        on session 25's costs (test_prefill_policy_pipelined.py) the tail estimate
        priced 128 tokens at 36 to 127 ms: a 256-token chunk in every prompt (157 ms a
        step), or 64 tokens and a calm step in turn where 128 fit."""
        if not self._in_flight or not length or line is None:
            return 0.0
        cost_s = line.extra_s(length)
        return min(max(0.0, cost_s - own_s), self.tails.most_s(length, cost_s))


def _mix(old: float | None, new: float) -> float:
    return new if old is None else (1 - _ALPHA) * old + _ALPHA * new
