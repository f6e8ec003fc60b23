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
chunk in (prefill_budget.py).

Plain Python (no mlx, no clock): PrefillBudget feeds it the steps that read a prompt
with nobody streaming.
"""
from __future__ import annotations

from collections import Counter

RECENT = 16     # alone steps kept


class AlonePrefillCost:
    def __init__(self):
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
