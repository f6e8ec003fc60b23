"""Degraded mode: where the reading-pace floor cannot hold, a bounded slowdown instead.

Where even one smallest chunk beside a calm step overruns the floor (a CPU, or a batch
whose calm step is itself slower than the floor; measured, not predicted: the smallest
chunk is read twice before the mode starts), the floor cannot hold. The step may then be
max(floor, calm x (1 + max_slowdown)), and the prompt still gets at least the smallest
chunk so that a new conversation's wait stays bounded (prompt length / MIN_CHUNK steps);
where the smallest chunk's own cost overruns that, the chunk may cost up to
(1 + max_slowdown) x the smallest's. Nothing is banked (engine/core/reading_bank.py): the
floor is not held. The allowance says the mode is active; the step loop puts it in every
StepEvent.

Plain Python (no mlx, no clock): PrefillBudget asks it when the mode starts and what a
degraded step's prompt may take, and picks the chunk itself (engine/core/chunk_choice.py).
"""
from __future__ import annotations


def measures_smallest_first(smallest_readings: int, calm_s: float, floor_s: float) -> bool:
    """Whether the smallest chunk, read smallest_readings times beside this batch, is to
    be read (again) before degraded mode starts. Degraded mode on a prediction alone
    would give up the floor for a line's guess: the smallest chunk (the least slowdown)
    is measured first, twice, and its cost (the lower reading) decides. Until then the
    mode has not started (a step flagged degraded says the floor cannot hold). On the
    H200 such a probe read 16 tokens in 48-63 ms, within the 67 ms floor that a line
    extrapolated down from 64 tokens had called out of reach; and one reading in a spike
    (a GPU's step 1.8x its cost, one in ~16) set the mode off with chunks of 2.25x its
    cost: 256 tokens in 145-168 ms steps (session 15). A calm step itself over the floor
    needs no reading to tell."""
    return smallest_readings < 2 and calm_s <= floor_s


def prompt_bound_s(floor_s: float, calm_s: float, max_slowdown: float, bias: float,
                   smallest_s: float) -> float:
    """Seconds above the calm step a degraded step's prompt may take. smallest_s: the
    smallest chunk's predicted cost; bias: how much recent mixed steps overran their
    predictions on average (PrefillBudget.bias, at least 1)."""
    # The step's bound, on predictions corrected by how much recent steps overran
    # theirs on average (a CPU's mixed steps came out ~25 % over, session 9: the
    # streams' median gap 2.8-2.9x calm against the 2.25x the bound allows)
    bound_s = max(floor_s, calm_s * (1 + max_slowdown)) / bias
    prompt_s = max(bound_s - calm_s, 0.0)
    if smallest_s > prompt_s:
        # Where even the smallest chunk overruns that step (its fixed cost), a chunk
        # costing up to max_slowdown more than the smallest is read instead: nearly the
        # same step, many more tokens. Only there: where it fits, the bound holds, and
        # 2.25x its cost let 64-128-token chunks in on this CPU (session 15: 16 tokens
        # ~110 ms above a 143 ms calm step, 64 tokens 234: steps of 2.6-2.8x calm
        # against the 2.25x the bound promises)
        prompt_s = (1 + max_slowdown) * smallest_s
    return prompt_s
