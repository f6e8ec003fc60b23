"""Bytes this rank's collectives send, counted as their graphs are built.

A ring all_sum of S bytes over n ranks sends 2 (n-1)/n S from each rank (reduce-
scatter, then all-gather); an all_gather of S bytes per rank sends (n-1) S. Counted
in Python when a collective is added to the graph: exact for plain forwards, and a
compiled forward counts only the call that traced it (the benchmark runs plain).
"""
from __future__ import annotations


class Traffic:
    def __init__(self):
        self.plan = 0           # the step's broadcast messages (wire.py)
        self.activations = 0    # the blocks' all_sums and the head's all_gather

    def all_sum(self, nbytes: int, n: int, plan: bool = False) -> None:
        sent = 2 * (n - 1) * nbytes // n
        if plan:
            self.plan += sent
        else:
            self.activations += sent

    def all_gather(self, nbytes: int, n: int) -> None:
        self.activations += (n - 1) * nbytes

    @property
    def total(self) -> int:
        return self.plan + self.activations


TRAFFIC = Traffic()
