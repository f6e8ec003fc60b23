"""Issue 21's max gap: what a chunk's whole cost is bounded by, for the cap that keeps it
within MAX_GAP_FLOORS floors with the calm step (PrefillBudget._within_max_gap).

Plain Python (no mlx, no clock): PrefillBudget gives it the cost line and what was read.
"""
from __future__ import annotations

from engine.core.chunk_choice import steps_up_at
from engine.core.mixed_step_cost import CostLine

# A chunk's whole cost (its own step and its tail) at most this many floors with the calm
# step: issue 21's max gap. On a pipelined GPU the streams' next tokens come after all of
# the chunk's device work, however the host's steps split it (chunk_tails.py): on the
# H200 (session 24) a 512-token probe predicted at 83 ms for its own step took 135 + 115,
# and every stream waited 240 ms for a token.
MAX_GAP_FLOORS = 2.0


def whole_bound_s(n: int, line: CostLine, measured: list[int], alone_s: float | None) -> float:
    """A chunk of n tokens' whole cost above the calm step, as the max-gap cap sees it
    (measured: the lengths read, ascending; alone_s: a prompt token's seconds read alone,
    if known): its own where read; else the line's, but at least m's cost in proportion
    to the tokens (m: the longest shorter length read), and no bound at all past 2m
    (never within the cap: beside the streams a chunk grows by doubling). A cost with a
    fixed part grows slower than its tokens (the fixed part is not paid twice), so
    proportion bounds it; not a cost that grows faster, which nothing read below says.
    Where the cost stepped up into m (steps_up_at: another path's launches, a fixed cost
    that rose), m's cost and the added tokens at the alone prefill's seconds each where
    lower, as the probes' bound (chunk_choice.probe_unread): session 21's H200 (64
    tokens 76 ms, 128 87) still reads 128 (bound ~110). On session 25's (64 tokens ~52
    ms above a 13 ms calm step, 128 65-87 by process, 256 ~140-150) the line priced 256
    at ~120 ms and it was read after 64 (4x) or as the probe after 128: every stream
    waited 150-168 ms for a token in each process; 128 at 65 and the alone rate would
    have let it in again (116 ms), proportion does not (130)."""
    shorter = [m for m in measured if m < n]
    if n in measured or not shorter:
        return line.extra_s(n)
    m = shorter[-1]
    if n > 2 * m:
        return float("inf")
    bound_s = line.extra_s(m) * n / m
    if alone_s is not None and steps_up_at(m, line, alone_s):
        bound_s = min(bound_s, line.extra_s(m) + (n - m) * alone_s)
    return max(line.extra_s(n), bound_s)
