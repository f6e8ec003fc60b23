"""The least a prompt chunk can cost, from what chunks read alone cost.

A chunk's forward costs a fixed part (its launches, the weights it reads) plus its
tokens, so a token costs less in a longer chunk: a chunk of n tokens costs at least n x
the seconds a token took in any chunk of n or more tokens read alone, and, longer than
every chunk read alone, at least what the longest one cost. Of the readings the cheapest
counts (a stall, a first shape compiling, is an upward outlier; a bound must not move
with one). Where the only readings stalled, the bound stays high until a cheaper alone
reading comes: chunks beside the streams then come out shorter than they could be (a
slower prompt), never longer (a longer gap).

Plain Python (no mlx, no clock): PrefillBudget feeds it the steps that read a prompt
with nobody streaming.
"""
from __future__ import annotations

RECENT = 16     # alone steps kept


class AlonePrefillCost:
    def __init__(self):
        self._readings: list[tuple[int, float]] = []    # (tokens, seconds), newest last

    def observe(self, tokens: int, seconds: float) -> None:
        """A step read `tokens` prompt tokens, and nothing else, in `seconds`."""
        if tokens > 0 and seconds > 0:
            self._readings = (self._readings + [(tokens, seconds)])[-RECENT:]

    def least_s(self, tokens: int) -> float:
        """The least seconds a chunk of `tokens` costs alone (0.0: nothing read alone)."""
        if not self._readings or tokens <= 0:
            return 0.0
        longer = [s / n for n, s in self._readings if n >= tokens]
        if longer:
            return tokens * min(longer)
        longest = max(n for n, _ in self._readings)
        return min(s for n, s in self._readings if n == longest)
