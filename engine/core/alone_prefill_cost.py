"""The least a prompt chunk can cost, from what chunks read alone cost.

A chunk's forward costs a fixed part (its launches, the weights it reads) plus its
tokens, so a token costs less in a longer chunk: a chunk of n tokens costs at least n x
the seconds a token took in any chunk of n or more tokens read alone, and, longer than
every chunk read alone, at least what the longest one cost. Of the readings the cheapest
counts (a stall, a first shape compiling, is an upward outlier; a bound must not move
with one), and only lengths read alone at least twice count: a length's one reading may
be its compile (a chat's first prompt, one chunk, read right after a cold start), and a
bound too high does harm too. In degraded mode a chunk may cost up to 2.25x the
smallest's predicted cost, so a smallest chunk predicted seconds dear lets a 512-token
chunk in (degraded_mode.py).

A chunk read beside decode rows is predicted at no less than a share of that least
cost (floor_s). Where a step runs the chunk as its own forward (mixed forwards off, as
on CUDA), the chunk's kernels and launches are the alone ones: OWN_FORWARD_SHARE. Where
one mixed forward reads the chunk and the decode rows together, the chunk shares the
weight reads the rows make: MIXED_FORWARD_SHARE.

Plain Python (no mlx, no clock): PrefillBudget feeds it the steps that read a prompt
with nobody streaming.
"""
from __future__ import annotations

from collections import Counter

RECENT = 16     # alone steps kept
# A chunk run as its own forward: on the H200 (session 13, engine.bench.concurrency
# --steps-log) 256-token chunks beside 7 streams cost 1.02x their alone time and 32-token
# ones 1.75x. Not 1: the step's read-back and sampling (a few ms) are paid once, by the
# calm step the chunk's cost is read above.
OWN_FORWARD_SHARE = 0.9
# One mixed forward: on the H200 a 512-token chunk cost 0.95x its alone time and 16-token
# ones 1.5-3x theirs; on this CPU 0.8-1.0x (session 12). Half leaves room for a mixed
# forward that shares more than those did, and still calls 4x too cheap wrong.
MIXED_FORWARD_SHARE = 0.5


class AlonePrefillCost:
    def __init__(self, share: float = MIXED_FORWARD_SHARE):
        """share: the least share of its alone cost a chunk beside decode rows costs
        (OWN_FORWARD_SHARE or MIXED_FORWARD_SHARE)."""
        self.share = share
        self._readings: list[tuple[int, float]] = []    # (tokens, seconds), newest last
        self._counted: list[tuple[int, float]] = []     # those of lengths read twice

    def observe(self, tokens: int, seconds: float) -> None:
        """A step read `tokens` prompt tokens, and nothing else, in `seconds`."""
        if tokens > 0 and seconds > 0:
            self._readings = (self._readings + [(tokens, seconds)])[-RECENT:]
            lengths = Counter(n for n, _ in self._readings)
            self._counted = [(n, s) for n, s in self._readings if lengths[n] >= 2]

    def least_s(self, tokens: int) -> float:
        """The least seconds a chunk of `tokens` costs alone (0.0: no length read alone
        twice). Called for every chunk length a step's plan weighs: the readings that
        count are sorted out when they come, in observe."""
        readings = self._counted
        if not readings or tokens <= 0:
            return 0.0
        longer = [s / n for n, s in readings if n >= tokens]
        if longer:
            return tokens * min(longer)
        longest = max(n for n, _ in readings)
        return min(s for n, s in readings if n == longest)

    def floor_s(self, tokens: int) -> float:
        """The least a chunk of `tokens` may be predicted to add beside decode rows."""
        return self.share * self.least_s(tokens)
