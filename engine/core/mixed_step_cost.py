"""What reading a prompt chunk beside the decode rows costs: fixed + tokens x per_token.

A mixed step (decode rows and a prompt chunk in one step) takes

    calm + fixed + tokens x per_token

seconds: the calm step (decode rows only), a fixed cost that any chunk pays whatever
its length (its own attention and recurrence launches, the experts its first tokens
route to), and a per-token cost. Charging all of it to the tokens (rate = tokens /
(step - calm), the policy before issue 21) learns a rate that is too low for a small
chunk, so the next chunk is small again, and the policy never leaves its smallest
chunk: on the GPU every mixed step ran degraded with 16-32-token chunks although the
calm step was well inside the floor.

So the cost of each chunk length is kept apart (the median of its last RECENT times
above the calm step: a GPU's mixed steps spread 0.75-1.4x and now and then one takes
2-3x; a moving average let one such step at the floor's chunk push every length over
the floor, and the policy dropped into degraded mode with 256-token chunks at 2-3x the
floor on the H200, session 11, where the median moves only once most readings do). A
length measured is predicted by its own median (the cost is not linear in the tokens
on an MoE model: the experts a chunk reads saturate at a few dozen
tokens); between measured lengths, by the segment joining them; past them, by a line
fitted through them (least squares, its slope never steeper than the last segment's
nor the alone bound) up to twice the longest, and at least the alone rate beyond
(a nearly flat line, as host-bound GPU steps give, must not call a 4x longer chunk
cheap). With one length seen, the line is not determined: the per-token
cost is then bounded by the alone prefill's (seconds per token when a prompt is read
with nobody streaming, which includes that step's own fixed cost, so it is an upper
bound), and the rest is the fixed cost.

Whatever was measured, no chunk is predicted below a share of the least its tokens
cost alone (engine/core/alone_prefill_cost.py): a floor on every prediction.
Readings are seconds above the calm step as it was estimated then; while streams are
admitted (other batch widths, first shapes compiling) that estimate can be far off, and
on the H200 (session 12) such readings had a 512-token chunk predicted 41 ms above the
calm step: it took 250 ms, as alone (the chunk's forward is the alone forward where
mixed forwards are off), and the streams waited 270 ms twice. Tokens beside decode rows
save at most the weight reads those rows already made; their arithmetic is the same.

Plain Python (no mlx, no clock): PrefillBudget feeds it measured seconds.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from engine.core.alone_prefill_cost import AlonePrefillCost

RECENT = 5            # readings of a length whose median predicts it
_MAX_AGE = 64         # a length not seen for this many mixed steps is forgotten
# A length not read for this many mixed steps: its readings are of other steps (another
# prompt's ends, an admission's stalls), and its next reading starts it anew. On the H200
# (session 18) 128 tokens read dear three times in a row (a prompt's last chunk, the
# next one's first) kept their median over the bank's room while 64-token chunks were
# read back to back for whole prompts; one fresh reading moves such a median not at all.
STALE_AFTER = 16


@dataclass
class _Length:
    last_seen: int    # mixed-step index of its last observation
    recent: list[float] = field(default_factory=list)   # its last RECENT readings
    count: int = 0    # observations

    @property
    def extra_s(self) -> float:
        """Seconds above the calm step: of two readings the lower (a length's first step
        may include compiling its kernels, 100 ms and more on a GPU), else the median of
        the recent ones, the lower middle of an even count (a stall is an upward outlier;
        one moves it not at all)."""
        if len(self.recent) == 2:
            return min(self.recent)
        return statistics.median_low(self.recent)


@dataclass(frozen=True)
class CostLine:
    fixed_s: float        # seconds any chunk pays beside a calm step (the line's)
    per_token_s: float    # seconds each of its tokens adds (the line's)
    # The slope is known: fitted through two or more lengths, or bounded by the alone
    # prefill's. False: one length seen and no bound, so the fixed cost was assumed 0
    # and the slope may be too steep (the budget then probes, see chunk_choice.py).
    known_slope: bool
    points: tuple[tuple[int, float], ...] = ()   # (length, seconds) measured, ascending
    # Seconds per token more than twice past the longest measured length: the alone
    # prefill's where known (an upper bound), else the line's. The line's (flattened)
    # slope reaches only the next length up: where a step is bound by the host (a GPU's
    # launches) lengths a few tokens apart cost about the same, the line comes out
    # nearly flat, and a chunk 4x the longest measured was predicted to fit and took
    # 3.6x the floor (the H200, session 6). A wrong guess one length up costs ~2x.
    past_per_token_s: float | None = None
    # What chunks read alone cost: no chunk is predicted below its share of the least
    # its tokens cost alone (AlonePrefillCost.floor_s; None: no floor)
    alone: AlonePrefillCost | None = None
    # (length, seconds) of the points read at least twice: what a longer chunk is never
    # predicted under. A single reading may be a stall (a new decode trace, 300 ms on the
    # H200), and as this floor one such had every chunk of the next prompt degraded.
    confirmed: tuple[tuple[int, float], ...] = ()

    def extra_s(self, tokens: int) -> float:
        """Seconds a chunk of `tokens` adds to a calm step: never less than a shorter
        length was measured at, twice or more (more tokens never cost less; on the CPU
        odd lengths had 72 tokens predicted 140 ms under 64), nor than the alone floor."""
        least = self.alone.floor_s(tokens) if self.alone else 0.0
        shorter = max((e for n, e in self.confirmed if n <= tokens), default=0.0)
        return max(self._measured_extra_s(tokens), shorter, least)

    def _measured_extra_s(self, tokens: int) -> float:
        line = self.fixed_s + tokens * self.per_token_s
        for (n0, e0), (n1, e1) in zip(self.points, self.points[1:]):
            if n0 <= tokens <= n1:             # between two measured lengths
                return e0 + (e1 - e0) * (tokens - n0) / (n1 - n0)
        if self.points and tokens == self.points[0][0]:
            return self.points[0][1]
        if self.points and tokens < self.points[0][0]:
            # Below the shortest measured length: down from it along the slope, never
            # under the line. A fitted intercept can come out near 0 where the fixed
            # cost is large (the H200, session 9: 32 tokens predicted 6 ms above the
            # calm step after 64 and 128 were measured at ~40 and ~75; they took 60-80).
            n, e = self.points[0]
            return max(line, e - (n - tokens) * self.per_token_s)
        if self.points and tokens > self.points[-1][0]:
            n, e = self.points[-1]             # past them: the line's slope up to 2n,
            near = min(tokens, 2 * n)          # then at least the alone rate
            far = max(self.per_token_s, self.past_per_token_s or 0.0)
            return e + (near - n) * self.per_token_s + (tokens - near) * far
        return line


class MixedStepCost:
    def __init__(self):
        self._lengths: dict[int, _Length] = {}
        self._num_observed = 0

    @property
    def lengths(self) -> list[int]:
        """Chunk lengths with a current measurement, ascending."""
        return sorted(self._lengths)

    def observe(self, tokens: int, extra_s: float) -> None:
        """A mixed step of `tokens` prompt tokens took extra_s above the calm step."""
        stale = self.is_stale(tokens)
        self._num_observed += 1
        seen = self._lengths.setdefault(tokens, _Length(self._num_observed))
        if stale:
            seen.recent = []            # of other steps: this reading starts it anew
        seen.recent = (seen.recent + [max(extra_s, 0.0)])[-RECENT:]
        seen.last_seen = self._num_observed
        seen.count += 1
        for n in [n for n, v in self._lengths.items()
                  if self._num_observed - v.last_seen > _MAX_AGE]:
            del self._lengths[n]

    def skip(self) -> None:
        """A mixed step that is no reading (a length between the set's, a prompt's odd
        rest): the lengths age as in any mixed step, so a length read dear long ago is
        stale after STALE_AFTER of them (on the CPU whole prompts were read at 24 tokens,
        a length between 16 and 32, while 32's readings from the streams' admission kept
        it out for good: session 20)."""
        self._num_observed += 1

    def add_to_newest(self, tokens: int, seconds: float) -> None:
        """The newest reading of this length took `seconds` more (its tail, read in the
        step after it, less the tail it was read with: ChunkReadings.charge_tail; so
        seconds may be negative); nothing if the length is forgotten."""
        seen = self._lengths.get(tokens)
        if seen and seen.recent:
            seen.recent[-1] = max(seen.recent[-1] + seconds, 0.0)

    def is_stale(self, tokens: int) -> bool:
        """Whether this length was measured but not read for STALE_AFTER mixed steps (its
        next reading starts it anew)."""
        seen = self._lengths.get(tokens)
        return seen is not None and self._num_observed - seen.last_seen >= STALE_AFTER

    def count(self, tokens: int) -> int:
        """Observations of this chunk length (0: none current)."""
        seen = self._lengths.get(tokens)
        return seen.count if seen else 0

    def line(self, alone_per_token_s: float | None,
             alone: AlonePrefillCost | None = None) -> CostLine | None:
        """The fitted cost line, or None before any mixed step. alone_per_token_s: the
        alone prefill's seconds per token (an upper bound on per_token), if known;
        alone: what chunks read alone cost (a floor on every prediction)."""
        if not self._lengths:
            return None
        points = sorted((n, v.extra_s) for n, v in self._lengths.items())
        confirmed = tuple((n, v.extra_s) for n, v in sorted(self._lengths.items())
                          if v.count >= 2)
        if len(points) >= 2:
            fixed, per_token = _least_squares(points)
            (n0, e0), (n1, e1) = points[-2:]
            per_token = min(per_token, max(e1 - e0, 0.0) / (n1 - n0) or per_token)
            if alone_per_token_s is not None:
                per_token = min(per_token, alone_per_token_s)
            if per_token > 0:
                # Refit the intercept for a clamped slope; a fixed cost is never negative.
                fixed = max(0.0, sum(e - n * per_token for n, e in points) / len(points))
                return CostLine(fixed, per_token, known_slope=True, points=tuple(points),
                                past_per_token_s=alone_per_token_s, alone=alone,
                                confirmed=confirmed)
        # One length (or no rising line): the longest's cost per token, bounded.
        n, e = points[-1]
        per_token = e / n
        bounded = alone_per_token_s is not None and alone_per_token_s <= per_token * (1 + 1e-6)
        if bounded:
            per_token = alone_per_token_s
        return CostLine(max(0.0, e - n * per_token), per_token, known_slope=bounded,
                        points=tuple(points), past_per_token_s=alone_per_token_s,
                        alone=alone, confirmed=confirmed)


def _least_squares(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (tokens, seconds)."""
    k = len(points)
    mean_n = sum(n for n, _ in points) / k
    mean_e = sum(e for _, e in points) / k
    var = sum((n - mean_n) ** 2 for n, _ in points)
    slope = sum((n - mean_n) * (e - mean_e) for n, e in points) / var
    return mean_e - slope * mean_n, slope
