"""Which chunk length a step beside streaming decodes reads, given the room it has.

The chunk is the longest length of engine/core/shapes.py whose predicted step fits the
room (engine/core/prefill_budget.py says what room: the floor, the bank's, degraded
mode's); in degraded mode where nothing is padded (the CPU), any multiple of 8 tokens
between that length and the next one up where the next one's cost rules it out
(`between`). Four rules keep the policy from locking itself into a small chunk (issue 21):
- the fixed cost is never charged to the tokens: a length measured is predicted by its
  own cost, others from the segments and line through the measured ones, or, with one
  length, a slope bounded by the alone prefill's seconds per token (an upper bound)
  with the rest of the step taken as the fixed cost (engine/core/mixed_step_cost.py);
- with one length measured and no bound (the slope may be too steep: a fixed cost
  taken for tokens), the next length up is tried once, where even a cost linear in the
  tokens keeps that step's prompt part within twice its share (always in degraded
  mode); its cost is at most (up / measured) x the measured one, since the fixed part is
  not paid twice;
- where tokens beside decode rows are measured cheaper than alone ones, or the next
  length up was read only once or not for PROBE_EVERY mixed steps, after PROBE_EVERY
  steps at one length the next length up is measured once, if twice this chunk's cost
  keeps the step within twice the floor: a cost that flattens with the tokens (an MoE
  chunk's experts saturate) is under-read by any line, and old readings price a length
  by other steps than these;
- where the cost rose into this length faster than alone tokens cost (a step in the
  fixed cost: another path's launches), a next length up never read is measured once
  after PROBE_NEW steps at this one (`probe_unread`), within twice the floor.
Chunks also grow by at most 4x the longest measured a step (WARMUP_TOKENS first), so a
wrong prediction costs one step, never a stall; outside degraded mode the max-gap cap
(engine/core/max_gap.py) keeps a length never read within 2x. While a surprising first
reading waits for its second (engine/core/chunk_readings.py), no length that long and no
new one.

Plain Python (no mlx, no clock): PrefillBudget gives it the room and the cost line.
"""
from __future__ import annotations

from engine.core.chunk_readings import ChunkReadings
from engine.core.mixed_step_cost import CostLine
from engine.core.shapes import MIN_CHUNK, chunk_lengths
from engine.core.step_predictions import StepPredictor

WARMUP_TOKENS = 64  # before anything is measured, read this much beside a decode
PROBE_EVERY = 16    # mixed steps at one length before the next length up is tried
PROBE_NEW = 4       # ... where the next length up was never read (its cost is a guess)
BETWEEN_STEP = 8    # degraded chunks between the set's lengths, where none is padded


class ChunkChoice:
    def __init__(self, max_chunk: int, predictor: StepPredictor, readings: ChunkReadings):
        """predictor: what a chunk costs in its own step and the next; readings: the
        lengths measured, and a reading held for its second."""
        self.max_chunk = max_chunk
        self.predictor = predictor
        self.readings = readings
        self._last_length = 0       # prompt tokens of the last mixed step
        self._num_same_length = 0   # consecutive mixed steps that read that many

    def after_mixed_step(self, prefill_tokens: int) -> None:
        """A mixed step read prefill_tokens: PROBE_EVERY of one length in a row probe."""
        same = prefill_tokens == self._last_length
        self._num_same_length = self._num_same_length + 1 if same else 1
        self._last_length = prefill_tokens

    def longest_within(self, prompt_s: float, line: CostLine, prompt_left: int | None = None,
                       follow_s: float | None = None, lend_s: float = 0.0) -> int:
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
        follow_s, the step after it; None: its whole cost must fit prompt_s. lend_s: the
        tail may also take what the own step leaves of prompt_s, up to lend_s more: the
        two steps together within twice the floor, the streams' pace held over the pair
        (the bank, reading_bank.py, holds the first step's time under the floor and the
        tail spends it). On the H200's session-24 costs a 128-token chunk's own step came
        in ~25 ms under the floor and its tail step 1-2 ms over it: without the loan the
        policy fell back to 64-token chunks, a calm step after each (2.7x alone in the
        scripted run, against 2.0x; tests/engine/test_prefill_policy.py)."""
        measured = self.readings.mixed.lengths
        cap = self._growth_cap()
        lengths = chunk_lengths(self.max_chunk)
        held = self.readings.held
        if held:                # a surprising reading waits for its second: nothing that
            cap = min(cap, held[0] - 1)     # long, and no new length (another guess)
            lengths = [n for n in lengths if n in measured]
        def fits(n: int) -> bool:
            if follow_s is None:
                return line.extra_s(n) <= prompt_s + 1e-9
            own_s = self.predictor.own_s(n, line)
            loan_s = min(max(prompt_s - own_s, 0.0), lend_s)
            return (own_s <= prompt_s + 1e-9
                    and self.predictor.tail_s(n, line) <= follow_s + loan_s + 1e-9)

        fitting = [n for n in lengths if n <= cap and fits(n)]
        best = fitting[-1] if fitting else 0
        if (best and prompt_left and best < prompt_left < best + MIN_CHUNK
                and prompt_left <= self.max_chunk and not held):
            if fits(self.predictor.runs_at(prompt_left)):
                return prompt_left
        return best

    def _growth_cap(self) -> int:
        """The longest chunk a step may read: 4x the longest measured beside a decode,
        WARMUP_TOKENS before any (the alone rate says little about a mixed step)."""
        measured = self.readings.mixed.lengths
        return 4 * measured[-1] if measured else WARMUP_TOKENS

    def between(self, tokens: int, prompt_s: float, line: CostLine,
                prompt_left: int | None = None) -> int:
        """Where chunks are not padded (the CPU): the longest multiple of BETWEEN_STEP
        tokens past `tokens`, short of the next length of the set, whose cost fits
        prompt_s (the line through the measured lengths), else tokens. Only where the
        next length's cost ruled it out, not the growth cap (4x the longest measured) nor
        a reading held for its second: a length between is no reading
        (step_predictions.reading_length), so below the cap it would hold the chunk there
        and nothing longer would ever be read."""
        up = next((n for n in chunk_lengths(self.max_chunk) if n > tokens), tokens)
        if self.readings.held or up > self._growth_cap() or line.extra_s(up) <= prompt_s + 1e-9:
            return tokens
        best = tokens
        for n in range(tokens + BETWEEN_STEP, up, BETWEEN_STEP):
            if prompt_left is not None and n > prompt_left:
                break
            if line.extra_s(n) <= prompt_s + 1e-9:
                best = n
        return best

    def probe(self, tokens: int, prompt_s: float, line: CostLine, degraded: bool,
              calm_s: float, floor_s: float, alone_s: float | None) -> int:
        """tokens, or the next chunk length up when tokens is the one length measured
        and the line's slope is not known (module docstring). The probe's cost is at
        most (up / tokens) x the measured one; it is tried where that stays within
        2 x prompt_s, or always in degraded mode (the floor is not holding anyway).
        calm_s: the calm step; floor_s: the step's bound (degraded mode's where that
        holds, not the floor, which the calm step alone overruns on a CPU); alone_s: a
        prompt token's seconds read alone, if known."""
        mixed = self.readings.mixed
        bigger = [n for n in chunk_lengths(self.max_chunk) if n > tokens]
        if not bigger:
            return tokens
        if not line.known_slope and mixed.lengths == [tokens]:
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
        flattens = (alone_s is not None and line.per_token_s < alone_s
                    and bigger[0] not in mixed.lengths)
        # So is one read only from readings PROBE_EVERY mixed steps old or older (its
        # next reading starts it anew, mixed_step_cost.STALE_AFTER): a length read dear a
        # few times in a row is otherwise never read again while a shorter one fits.
        run = self._last_length == tokens and self._num_same_length >= PROBE_EVERY
        # In degraded mode where nothing pads, the steps read a length between tokens and
        # the next one up (`between`), and a prompt's rest breaks any run: on the CPU a
        # 200-token prompt read 8 x 24 + 8, 32 priced out by readings from the streams'
        # admission, for good (session 20). There a stale next length is read again once
        # it is stale (STALE_AFTER mixed steps, which the steps between count too).
        stale_between = (degraded and tokens <= self._last_length < bigger[0]
                         and mixed.is_stale(bigger[0]))
        if ((stale_between or run and (flattens or mixed.count(bigger[0]) == 1
                                       or mixed.is_stale(bigger[0])))
                and calm_s + 2 * line.extra_s(tokens) <= 2 * floor_s):
            return bigger[0]
        if degraded:        # the bound is degraded mode's, which a probe would overrun
            return tokens
        return self.probe_unread(tokens, line, calm_s, floor_s, alone_s)

    def probe_unread(self, tokens: int, line: CostLine, calm_s: float, floor_s: float,
                     alone_s: float | None) -> int:
        """tokens, or the next length up where it was never read beside these rows and
        PROBE_NEW steps in a row read `tokens` (the floor's chunk, or the one the bank
        buys), if its cost's bound keeps that step within twice the floor: twice this
        chunk's cost (the fixed part is not paid twice) or this chunk's cost and the
        added tokens at the alone prefill's seconds per token (which include its fixed
        cost: an upper bound), whichever is lower. The H200 (session 21): 32
        tokens cost 44 ms above the calm step, 64 76 ms (a step in the launches: the
        experts' kernel up to 32 tokens, the sorted matmuls from 64) and 128 87; any line
        through 32 and 64 priced 128 over the bank's room, and the first prompt beside
        the streams was read at 32 and 64 for most of its length: 2.7x its time alone,
        against 1.8x once 128 was read. One such step a length, then its readings rule."""
        bigger = [n for n in chunk_lengths(self.max_chunk) if n > tokens]
        if (not bigger or bigger[0] in self.readings.mixed.lengths or self.readings.held
                or self._last_length != tokens or self._num_same_length < PROBE_NEW
                or not steps_up_at(tokens, line, alone_s)):
            return tokens
        bound_s = min(2 * line.extra_s(tokens),
                      line.extra_s(tokens) + (bigger[0] - tokens) * alone_s)
        return bigger[0] if calm_s + bound_s <= 2 * floor_s else tokens


def steps_up_at(tokens: int, line: CostLine, alone_s: float | None) -> bool:
    """Whether the cost rose into `tokens` from the next shorter length measured faster
    than tokens read alone cost (alone_s seconds each, their fixed cost included): a
    step in the fixed cost (another path's launches), not a cost per token, so the line
    through them says little about a longer chunk. Where it rises no faster, the line is
    an honest guess and no probe is spent on it."""
    shorter = [(n, e) for n, e in line.points if n < tokens]
    here = [e for n, e in line.points if n == tokens]
    if alone_s is None or not shorter or not here:
        return False
    n, e = shorter[-1]
    return (here[0] - e) / (tokens - n) > alone_s
