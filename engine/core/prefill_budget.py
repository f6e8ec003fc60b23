"""How many prompt tokens a step may read while other conversations stream.

The policy (docs/ENGINE.md, "Reading a prompt while others stream"): every streaming
conversation keeps at least a reading pace, steps of floor = 1 / min_stream_tok_s
seconds on average (one at most (1 + BURST) x the floor, see "The bank"); prompt reading
gets all the time above the calm decode step (a step with no prompt in it) up to that. A mixed step costs

    calm + fixed + tokens x per_token          (engine/core/mixed_step_cost.py)

so the chunk is the longest length of engine/core/shapes.py whose predicted step fits
the floor. Both the calm step and the cost line are measured from the engine's own
recent steps, here and nowhere else: the scheduler only receives the token count and
stays deterministic. On a GPU part of a chunk's cost lands in the step after it (its
tail, engine/core/chunk_tails.py): a step is predicted as its own part plus the tail of
the step before it, and a chunk fits where its own step fits the floor and its tail
fits the next. The calm step and the chunk costs are of one batch size at a time
(engine/core/calm_rows.py); each size seen keeps its own costs.

Three rules keep the policy from locking itself into a small chunk (issue 21):
- the fixed cost is never charged to the tokens: a length measured is predicted by its
  own cost, others from the segments and line through the measured ones, or, with one
  length, a slope bounded by the alone prefill's seconds per token (an upper bound)
  with the rest of the step taken as the fixed cost;
- with one length measured and no bound (the slope may be too steep: a fixed cost
  taken for tokens), the next length up is tried once, where even a cost linear in the
  tokens keeps that step's prompt part within twice its share (always in degraded
  mode); its cost is at most (up / measured) x the measured one, since the fixed part is
  not paid twice;
- where tokens beside decode rows are measured cheaper than alone ones, after
  PROBE_EVERY steps at one length the next length up is measured once, if twice this
  chunk's cost keeps the step within twice the floor: a cost that flattens with the
  tokens (an MoE chunk's experts saturate) is under-read by any line.
Chunks also grow by at most 4x the longest measured a step (64 tokens first), so a
wrong prediction costs one step, never a stall. And a length's first reading that
comes out above twice what was predicted for it is read once more before it is
believed (the lower reading counts): a new shape's first step on a GPU can include
compiling its kernels, and one such reading, taken as the cost, sent the H200 into
degraded mode with 256-token chunks at 2.3x the floor although 32-token chunks fit it
(issue 21; tests/engine/test_prefill_policy.py reproduces it).

The bank (issue 21): the floor is a reading pace, a rate; a reader does not see one
gap of 100 ms between gaps of 20 ms. Where a chunk has a large fixed cost (on the H200
~25 ms for any chunk beside 7 streams: its launches), the longest chunk that fits the
floor (32 tokens there) reads a token ~2x dearer than a 128-token one, which overruns
the floor. With calm steps c, a chunk's cost F + n p above them and steps averaging the
floor f, a share (f - c) / (F + n p) of the steps can read n tokens: the prompt reads
(f - c) / f x n / (F + n p) tokens a second, the most with the longest n, not with the
longest n that fits one step. So each step's time under the floor goes into a bank
(at most BURST x f), and where a longer chunk (a step up to (1 + BURST) x f) reads a
token more than 1 / BANK_GAIN cheaper than the floor's chunk, the policy reads that
chunk when the bank pays for its time over the floor, and otherwise runs a calm step
(tokens 0) that banks: a calm step and a 128-token step in turn on the H200's costs, 1.9x
the prompt's time alone instead of 3.5x (tests/engine/test_prefill_policy.py). Never two
steps over the floor in a row (a reader sees one long gap, then a short one), a prompt
that fits the floor's chunk is read at once (Scheduler.prompt_tokens_left), a prompt
waits at most MAX_BANKING calm steps in a row (then the floor's chunk), and without
a fixed cost (every chunk the same price a token) nothing changes: the floor's chunk,
every step.

Degraded mode: where even one smallest chunk beside a calm step overruns the floor (a
CPU, or a batch whose calm step is itself slower than the floor; measured, not
predicted: the smallest chunk is read once before the mode starts), the floor cannot
hold. The step may then be max(floor, calm x (1 + max_decode_slowdown)), and the
prompt still gets at least the smallest chunk so that a new conversation's wait stays
bounded (prompt length / MIN_CHUNK steps); where the smallest chunk's own cost overruns
that, the chunk may cost up to (1 + max_decode_slowdown) x the smallest's. The
allowance says the mode is active; the step loop puts it in every StepEvent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from engine.core.alone_prefill_cost import MIXED_FORWARD_SHARE, AlonePrefillCost
from engine.core.calm_rows import CalmRows
from engine.core.chunk_tails import ChunkTails
from engine.core.mixed_step_cost import CostLine, MixedStepCost
from engine.core.one_off_steps import OneOffSteps, is_one_off
from engine.core.shapes import DECODE_SIZES, MIN_CHUNK, chunk_lengths, padded_batch, padded_chunk

WARMUP_TOKENS = 64  # before anything is measured, read this much beside a decode
# Banked steps (module docstring, "The bank"): a step may last up to (1 + BURST) x the
# floor where the streams' earlier steps came in under it; the bank holds at most
# BURST x the floor. Below 1 (at most 2x the floor, issue 21's max gap) with room for a
# step that overruns its prediction.
BURST = 0.75
BANK_GAIN = 0.9     # a banked chunk must read this much faster per token than the floor's
MAX_BANKING = 3     # calm steps in a row a waiting prompt may give up before reading anyway
PROBE_EVERY = 16    # mixed steps at one length before the next length up is tried
OVERRUN_STEPS = 16  # recent mixed steps whose overrun of their prediction is kept
_ALPHA = 0.2        # weight of the newest step in the moving averages


@dataclass(frozen=True)
class _Queued:
    """A step queued on the device, as predicted when it was (PrefillBudget.queued)."""
    step_s: float | None    # its seconds (None: no decode rows in it, or nothing known)
    tokens: int             # prompt tokens it reads
    extra_s: float          # its predicted seconds above the calm step
    measured: bool          # its length had been measured: predicted from itself
    degraded: bool          # chosen in degraded mode
    behind: bool = False    # queued behind a step in flight, whose tail may land in it


@dataclass
class _Observed:
    """A mixed step as observed: where its reading went, so that its tail can follow."""
    length: int | None          # the chunk length its reading is kept at (None: nowhere)
    seconds: float              # its cadence
    predicted_s: float | None   # its prediction, where its overrun was kept
    held: bool                  # its reading is the held one, not yet in the cost line
    tail_s: float = 0.0         # its predicted tail (the part of its cost in the next step)
    runs_at: int | None = None  # the chunk length its forward ran at: whose tail it has


@dataclass(frozen=True)
class Allowance:
    tokens: int              # padded prompt tokens the next step may read
    degraded: bool = False   # the reading-pace floor cannot hold: bounded slowdown instead


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
        self.mixed = MixedStepCost()     # beside the batch the calm step is of
        self._costs: dict[int | None, MixedStepCost] = {}   # beside each batch size seen
        self._last_length = 0       # prompt tokens of the last mixed step
        self._num_same_length = 0   # consecutive mixed steps that read that many
        self._last: Allowance | None = None     # the last allowance given
        self._recheck: Allowance | None = None  # a surprising first reading, read again
        # (tokens, seconds above the calm step) of that first reading, kept out of the cost
        # line until the second comes: with a step in flight, the step planned between
        # would otherwise read a compile stall as the length's cost (degraded mode)
        self._held: tuple[int, float] | None = None
        # Seconds the streams' steps came in under the floor (the bank), in
        # [0, BURST x floor]: spent by a banked step, refilled by calm ones.
        self.bank_s = 0.0
        self._last_over_floor = False   # the last step with decode rows took > the floor
        self._banking = 0               # calm steps in a row given to the bank
        # Predicted seconds of the steps queued but not yet observed (None: no decode rows
        # in it). The step loop plans step n+1 before it reads step n back, so the bank
        # and the last step's length are known one step late; the policy counts the step
        # in flight at its prediction (queued), or it would read a second banked chunk
        # right after the first (the H200, session 9: two 256-token steps, 105 and 224 ms).
        self._in_flight: list[_Queued] = []
        # actual / predicted seconds of recent mixed steps at a length measured before:
        # how far a step overruns what it was chosen by (a GPU's steps vary by ~1.4x)
        self._overruns: list[float] = []
        # The last step observed, if it read a chunk beside decode rows: a calm step right
        # after it may carry the chunk's tail (_charge_tail)
        self._last_mixed: _Observed | None = None
        # Steps far over their prediction are not readings (engine/core/one_off_steps.py):
        # nor are their overruns the steps' spread (the banked cap, the bias)
        self._one_offs = OneOffSteps()
        # What part of a chunk's cost lands in the step after it (engine/core/chunk_tails.py)
        self.tails = ChunkTails()

    def allowance(self, decoding: bool, prompt_left: int | None = None) -> Allowance:
        """The next step's prompt tokens; the whole chunk when nobody is streaming.
        prompt_left: the fewest tokens a waiting prompt has left (Scheduler.
        prompt_tokens_left): one that fits the floor's chunk is read now, never banked for."""
        if not decoding or self.min_stream_tok_s <= 0:
            return Allowance(self.max_chunk)
        allowance = self._recheck or self._allowance(prompt_left)
        self._recheck = None
        self._last = allowance
        return allowance

    def _allowance(self, prompt_left: int | None = None) -> Allowance:
        runs_at = self._chunk_in_flight()
        if runs_at and not self.tails.known(runs_at):
            # A chunk in flight whose tail was never read: a calm step after it reads its
            # tail, and the reading of whatever follows it is not spoilt by an unknown
            # tail (chunk_tails.py). Once per length.
            return Allowance(0)
        line = self.cost_line()
        if self.decode_s is None or line is None:
            return Allowance(min(self.max_chunk, WARMUP_TOKENS))
        floor_s = 1.0 / self.min_stream_tok_s
        room_s = floor_s - self.decode_s
        # what fits a step and the one after it (its tail) decides whether the floor holds
        tokens = self._longest_within(room_s, line, prompt_left, follow_s=room_s)
        if not tokens and self._held and any(f.tokens == self._held[0] for f in self._in_flight):
            return Allowance(0)         # a calm step while the surprising length is read again
        pending_s = self._pending_tail_s(line)
        if tokens and pending_s:
            # The step in flight's tail lands in this step whatever it reads: a chunk
            # beside it (what still fits) must read about as fast a token as the chunk a
            # step without a tail fits, else a calm step takes the tail. On the H200 a
            # 16-token chunk squeezed beside a 128-token one's tail made a floor-long step
            # at a third of the pace: time the streams give and the prompt barely uses.
            free = tokens
            tokens = self._longest_within(room_s - pending_s, line, prompt_left, room_s)
            if tokens and (prompt_left is None or prompt_left > tokens) and (
                    self._rate(tokens, line) < BANK_GAIN * self._rate(free, line)):
                tokens = 0
            if not tokens:
                return Allowance(0)
        if tokens:
            probed = self._probe(tokens, floor_s - self.decode_s, line, False)
            if probed != tokens and self._ahead(floor_s)[1]:
                probed = tokens             # a probe may overrun: not right after a long step
            if prompt_left == 0:
                self._banking = 0           # no prompt waits: a new one starts afresh
            if probed != tokens or (prompt_left is not None and prompt_left <= tokens):
                return Allowance(probed)
            return Allowance(self._banked(tokens, floor_s, line, pending_s))
        self.bank_s = 0.0       # degraded: the floor is not held, nothing to bank
        # Where even the smallest chunk overruns that step (its fixed cost), a chunk
        # costing up to max_slowdown more than the smallest is read instead: nearly the
        # same step, many more tokens.
        smallest = min(MIN_CHUNK, self.max_chunk)
        if self.mixed.count(smallest) < 2 and self.decode_s <= floor_s:
            # Degraded mode on a prediction alone would give up the floor for a line's
            # guess: the smallest chunk (the least slowdown) is measured first, twice,
            # and its cost (the lower reading) decides. Until then the mode has not
            # started (a step flagged degraded says the floor cannot hold). On the H200
            # such a probe read 16 tokens in 48-63 ms, within the 67 ms floor that a line
            # extrapolated down from 64 tokens had called out of reach; and one reading
            # in a spike (a GPU's step 1.8x its cost, one in ~16) set the mode off with
            # chunks of 2.25x its cost: 256 tokens in 145-168 ms steps (session 15).
            return Allowance(smallest)
        if not self.mixed.count(smallest):
            return Allowance(smallest, degraded=True)   # the calm step alone overruns
        # The step's bound, on predictions corrected by how much recent steps overran
        # theirs on average (a CPU's mixed steps came out ~25 % over, session 9: the
        # streams' median gap 2.8-2.9x calm against the 2.25x the bound allows)
        bound_s = max(floor_s, self.decode_s * (1 + self.max_slowdown)) / self.bias()
        prompt_s = max(bound_s - self.decode_s, 0.0)
        if line.extra_s(smallest) > prompt_s:
            # Only where the smallest chunk itself overruns the bound: where it fits, the
            # bound holds, and 2.25x its cost let 64-128-token chunks in on this CPU
            # (session 15: 16 tokens ~110 ms above a 143 ms calm step, 64 tokens 234:
            # steps of 2.6-2.8x calm against the 2.25x the bound promises)
            prompt_s = (1 + self.max_slowdown) * line.extra_s(smallest)
        tokens = max(self._longest_within(prompt_s, line, prompt_left), smallest)
        tokens = self._probe(tokens, prompt_s, line, True)
        return Allowance(tokens, degraded=True)

    def _banked(self, tokens: int, floor_s: float, line: CostLine, pending_s: float) -> int:
        """The floor's chunk (tokens), or where a fixed cost per chunk makes a longer one
        much cheaper per token (BANK_GAIN), that longer one once the bank affords it, and
        until then no prompt at all (0: a calm step, banking its time under the floor).
        Reading the most tokens per second at an average step of the floor means reading
        the chunk with the most tokens per second of its own cost (module docstring).
        pending_s: the tail of the step in flight, which lands in this one."""
        # A banked step may last (1 + BURST) x the floor as predicted, and at most twice
        # the floor (issue 21's max gap) after the overrun the recent steps showed; the
        # step after it (the chunk's tail) within the floor.
        ceiling_s = min((1 + BURST) * floor_s, 2 * floor_s / self.overrun())
        best = self._longest_within(ceiling_s - self.decode_s - pending_s, line,
                                    follow_s=floor_s - self.decode_s)
        if best <= tokens or (tokens / max(line.extra_s(tokens), 1e-9)
                              >= BANK_GAIN * best / max(line.extra_s(best), 1e-9)):
            return tokens
        # its time over the floor
        need_s = self.decode_s + pending_s + self._own_s(best, line) - floor_s
        bank_s, over_floor = self._ahead(floor_s)
        if not over_floor and need_s <= bank_s:                   # never two in a row
            self._banking = 0
            return best
        calm_steps = math.ceil(max(0.0, need_s - bank_s) / (floor_s - self.decode_s))
        if self._banking >= MAX_BANKING or calm_steps > MAX_BANKING:
            # The bank fills too slowly (a calm step near the floor), or not as
            # predicted: the floor's chunk now rather than a prompt left waiting.
            self._banking = 0
            return tokens
        self._banking += 1
        return 0

    def _ahead(self, floor_s: float) -> tuple[float, bool]:
        """(the bank, whether the last step with decode rows is over the floor) once the
        steps in flight end as predicted."""
        bank_s, over_floor = self.bank_s, self._last_over_floor
        for q in self._in_flight:
            if q.step_s:
                # a length not measured yet may take anything: over the floor, banking nothing
                step_s = q.step_s if q.measured else max(q.step_s, floor_s + 1e-9)
                bank_s = min(BURST * floor_s, max(0.0, bank_s + floor_s - step_s))
                over_floor = step_s > floor_s
        return bank_s, over_floor

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

    def queued(self, decode_rows: int, prefill_tokens: int) -> None:
        """The step loop queued a step (observed later, in order): counted at its
        prediction until then, and read against it when it is observed."""
        self._in_flight.append(self._prediction(decode_rows, prefill_tokens))

    def _prediction(self, decode_rows: int, prefill_tokens: int) -> _Queued:
        """A step's prediction as it is queued: after the steps already in flight."""
        line = self.cost_line()
        behind = bool(self._in_flight)
        if not decode_rows or self.decode_s is None or (prefill_tokens and line is None):
            return _Queued(None, prefill_tokens, 0.0, False, False, behind)
        pending_s = self._pending_tail_s(line) if line else 0.0
        if not prefill_tokens:
            return _Queued(self.decode_s + pending_s, 0, 0.0, True, False, behind)
        length = self._reading_length(prefill_tokens)
        extra_s = line.extra_s(length or prefill_tokens)
        return _Queued(self.decode_s + pending_s + self._own_s(prefill_tokens, line),
                       prefill_tokens, extra_s, bool(length and self.mixed.count(length)),
                       bool(self._last and self._last.degraded), behind)

    def _tail_s(self, prefill_tokens: int, line: CostLine) -> float:
        """The part of a chunk's cost that lands in the step after it (chunk_tails.py)."""
        length = self._reading_length(prefill_tokens)
        return self.tails.tail_s(length, line.extra_s(length)) if length else 0.0

    def _own_s(self, prefill_tokens: int, line: CostLine) -> float:
        """The part of a chunk's cost in its own step (above the calm step)."""
        length = self._reading_length(prefill_tokens) or prefill_tokens
        return line.extra_s(length) - self._tail_s(prefill_tokens, line)

    def _rate(self, prefill_tokens: int, line: CostLine) -> float:
        """A chunk's tokens per second of its cost (at the length its forward runs at)."""
        length = self._reading_length(prefill_tokens) or prefill_tokens
        return prefill_tokens / max(line.extra_s(length), 1e-9)

    def _chunk_in_flight(self) -> int | None:
        """The chunk length the newest step in flight runs at, if it read a chunk beside
        decode rows (its tail lands in the step planned now); else None."""
        q = self._in_flight[-1] if self._in_flight else None
        return self._reading_length(q.tokens) if q and q.tokens and q.step_s else None

    def _pending_tail_s(self, line: CostLine) -> float:
        """The tail of the newest step in flight: it lands in the step planned now."""
        length = self._chunk_in_flight()
        return self.tails.tail_s(length, line.extra_s(length)) if length else 0.0

    def _reading_length(self, tokens: int) -> int | None:
        """The chunk length a mixed step of `tokens` prompt tokens is read as: the length
        its forward runs at (padded up where chunks are padded), if that is a length of
        the set; None for any other (a prompt's rest where chunks are not padded, or
        several prompts' chunks past the longest), whose reading is not kept. Such a
        step is read once and never again, so a one-off in it (a new decode trace while
        streams are admitted: 300 ms on the H200, session 14) cannot be told from its
        cost, and kept at its own length it set the least that every longer chunk was
        predicted at (CostLine.extra_s): each step of the next prompt ran degraded."""
        length = padded_chunk(tokens, self.max_chunk) if self.pads_chunks else tokens
        return length if length in chunk_lengths(self.max_chunk) else None

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
        return self.decode_s + self._pending_tail_s(line) + self._own_s(prefill_tokens, line)

    def tokens(self, decoding: bool) -> int:
        return self.allowance(decoding).tokens

    def cost_line(self) -> CostLine | None:
        """What a chunk adds to a calm step: measured from mixed steps, else (before any)
        bounded by the alone prefill rate (no fixed cost assumed); None: nothing known."""
        alone = 1.0 / self.prefill_tok_s if self.prefill_tok_s else None
        line = self.mixed.line(alone, self.alone)
        if line is None and alone is not None:
            return CostLine(0.0, alone, known_slope=True, alone=self.alone)
        return line

    def _longest_within(self, prompt_s: float, line: CostLine, prompt_left: int | None = None,
                        follow_s: float | None = None) -> int:
        """The longest chunk length (at most 4x the longest measured beside a decode,
        WARMUP_TOKENS before any: the alone rate says little about a mixed step) whose
        cost fits in prompt_s seconds above the calm step; 0 if none does. prompt_left
        (the fewest tokens a prompt has left) is a length too where it leaves that one
        fewer than MIN_CHUNK tokens and fits: the prompt's rest in this step rather than
        a step for its last few tokens (on the CPU, a 200-token prompt read as 6 x 32 + 8
        paid a whole ~300 ms step for its last 8 tokens; 40 cost ~26 ms more than 32).
        Its cost is that of the length its forward runs at (pads_chunks). Only a few
        tokens past a length that fits: an odd length far past the measured ones is
        predicted by a line, and on the CPU such a line let 128 tokens in at 3.3x calm.
        follow_s: a chunk's own step must fit prompt_s and its tail (chunk_tails.py)
        follow_s, the step after it; None: its whole cost must fit prompt_s."""
        measured = self.mixed.lengths
        cap = 4 * measured[-1] if measured else WARMUP_TOKENS
        lengths = chunk_lengths(self.max_chunk)
        if self._held:          # a surprising reading waits for its second: nothing that
            cap = min(cap, self._held[0] - 1)   # long, and no new length (another guess)
            lengths = [n for n in lengths if n in measured]
        def fits(n: int) -> bool:
            if follow_s is None:
                return line.extra_s(n) <= prompt_s + 1e-9
            return (self._own_s(n, line) <= prompt_s + 1e-9
                    and self._tail_s(n, line) <= follow_s + 1e-9)

        fitting = [n for n in lengths if n <= cap and fits(n)]
        best = fitting[-1] if fitting else 0
        if (best and prompt_left and best < prompt_left < best + MIN_CHUNK
                and prompt_left <= self.max_chunk and not self._held):
            runs_at = padded_chunk(prompt_left, self.max_chunk) if self.pads_chunks else prompt_left
            if fits(runs_at):
                return prompt_left
        return best

    def _probe(self, tokens: int, prompt_s: float, line: CostLine, degraded: bool) -> int:
        """tokens, or the next chunk length up when tokens is the one length measured
        and the line's slope is not known (module docstring). The probe's cost is at
        most (up / tokens) x the measured one; it is tried where that stays within
        2 x prompt_s, or always in degraded mode (the floor is not holding anyway)."""
        bigger = [n for n in chunk_lengths(self.max_chunk) if n > tokens]
        if not bigger:
            return tokens
        if not line.known_slope and self.mixed.lengths == [tokens]:
            if degraded or line.extra_s(tokens) * bigger[0] / tokens <= 2 * prompt_s:
                return bigger[0]
        # A cost that flattens with the tokens (an MoE chunk's experts saturate) makes
        # any extrapolation call a longer chunk too dear. Where the tokens are measured
        # cheaper than alone ones (a sign of it), after PROBE_EVERY steps at one length
        # the next one up is measured once, if even twice this chunk's cost (a bound:
        # the fixed part is not paid twice) keeps the step within twice the floor. So is
        # a next length up read only once: one spike (a GPU's step 1.8x its cost, one in
        # ~16) priced 128 tokens over the floor, and 64-token chunks read for 30 steps
        # at ~85 % of the pace (session 15's replays); a second reading, the lower counts.
        alone = 1.0 / self.prefill_tok_s if self.prefill_tok_s else None
        flattens = (alone is not None and line.per_token_s < alone
                    and bigger[0] not in self.mixed.lengths)
        if (self._last_length == tokens and self._num_same_length >= PROBE_EVERY
                and (flattens or self.mixed.count(bigger[0]) == 1) and self.decode_s
                + 2 * line.extra_s(tokens) <= 2 / self.min_stream_tok_s):
            return bigger[0]
        return tokens

    def observe(self, seconds: float, decode_rows: int, prefill_tokens: int) -> None:
        """Learn from a finished step (its cadence, in seconds)."""
        # the step's prediction when it was queued (callers that do not queue: as of their
        # last allowance, if they asked for one, and taken to run behind the step before)
        if self._in_flight:
            q = self._in_flight.pop(0)
        elif self._last is not None:
            q = replace(self._prediction(decode_rows, prefill_tokens), behind=True)
        else:
            q = _Queued(None, prefill_tokens, 0.0, False, False, behind=True)
        if seconds <= 0:
            return
        if decode_rows and self.min_stream_tok_s > 0:
            floor_s = 1.0 / self.min_stream_tok_s
            # Not below 0: a step that overran its prediction (a first shape compiling)
            # is not paid back by the prompt waiting longer.
            self.bank_s = min(BURST * floor_s, max(0.0, self.bank_s + floor_s - seconds))
            self._last_over_floor = seconds > floor_s
        last_mixed, self._last_mixed = self._last_mixed, None
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
            if last_mixed is not None and tail_s > 0:
                self._charge_tail(last_mixed, tail_s)
            elif (fresh_s := self.calm_rows.calm(batch, seconds)) is not None:
                # The batch's size changed: so did what a chunk costs beside it (on the
                # CPU, readings beside the two rows of an admission priced 32 tokens at
                # 230 ms beside three, where they took ~140: never read again, they held
                # the chunk at 16 for whole prompts, TTFT 3.5-4.6x alone; session 15).
                # Each size keeps its own costs: conversations come and go, and the
                # sizes come back.
                self._costs[calm_rows] = self.mixed
                self.decode_s, self._held = fresh_s, None
                self.mixed = self._costs.setdefault(batch, MixedStepCost())
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
            length = runs_at = self._reading_length(prefill_tokens)
            if not self.calm_rows.of(batch):
                length = None       # beside a batch the calm estimate is not of: no reading
            before = last_mixed.runs_at if last_mixed is not None else None
            if before and line is not None:
                carried_s = self.tails.tail_s(before, line.extra_s(before))
                extra_s -= carried_s
                self._charge_tail(last_mixed, carried_s, measured=False)
            # A held reading lasts until the next mixed step: its second reading, or (a
            # prompt that ended short of the length, another length planned first) it
            # is dropped, never left to hold the chunk down, and never believed alone:
            # believed, one stall (a new decode trace while streams were admitted) was
            # the least any chunk was predicted at (the H200, session 14: 3.4 s).
            held, self._held = self._held, None
            if held and held[0] != length:
                held = None
            kept = q.step_s if q.step_s and q.measured and length else None
            readings = [extra_s]
            if kept:                        # predicted from its own length (so one of the set)
                readings = self._one_offs.readings(length, extra_s, seconds, kept)
                if not readings:
                    length = None           # a one-off: nor a reading of its length
            if is_one_off(seconds, kept):
                kept = None                 # a one-off, not the steps' spread
            if kept:                        # its noise
                self._overruns = (self._overruns + [seconds / kept])[-OVERRUN_STEPS:]
            if length is None:
                pass                        # an odd length: not kept (_reading_length)
            elif (q.step_s and not held and not self.mixed.count(length)
                    and q.tokens == prefill_tokens and extra_s > 2 * q.extra_s):
                self._held = (length, extra_s)     # read it again before believing it
                # read again at once where it is a whole chunk and none is in flight; a
                # prompt's padded rest is read again by the next chunk of its length
                if prefill_tokens == length and not any(
                        f.tokens == length for f in self._in_flight):
                    self._recheck = Allowance(length, q.degraded)
            elif held:                                     # of two readings, the lower counts
                self.mixed.observe(length, min(extra_s, held[1]))
            else:
                for reading in readings:
                    self.mixed.observe(length, reading)
            self._last_mixed = _Observed(length, seconds, kept, self._held is not None,
                                         self._tail_s(prefill_tokens, line) if line else 0.0,
                                         runs_at)
            same = prefill_tokens == self._last_length
            self._num_same_length = self._num_same_length + 1 if same else 1
            self._last_length = prefill_tokens

    def _charge_tail(self, chunk: _Observed, tail_s: float, measured: bool = True) -> None:
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
        measured: the tail predicted for a chunk followed by another (chunk_tails.py),
        moved from the second's reading to the first's; the overruns stay as they were."""
        if chunk.length is None:
            pass                        # a reading not kept: its tail neither
        elif chunk.held and self._held and self._held[0] == chunk.length:
            self._held = (chunk.length, self._held[1] + tail_s)
        elif not chunk.held:
            self.mixed.add_to_newest(chunk.length, tail_s)
        if chunk.predicted_s and self._overruns and measured:
            predicted_s = chunk.predicted_s + chunk.tail_s     # the two steps, as predicted
            if is_one_off(chunk.seconds + tail_s, predicted_s):
                self._overruns.pop()        # with its tail, a one-off after all
            else:
                self._overruns[-1] = (chunk.seconds + tail_s) / predicted_s


def _mix(old: float | None, new: float) -> float:
    return new if old is None else (1 - _ALPHA) * old + _ALPHA * new
