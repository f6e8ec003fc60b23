"""engine.bench.concurrency places each long gap among the steps (no timing: made-up
clocks), so a max gap over issue 21's target says whether steps or the time between
them made it."""
from engine.bench.concurrency import long_gaps
from engine.events import StepEvent


def _step(n: int, t0: float, t1: float) -> StepEvent:
    return StepEvent(step=n, t_start=t0, t_end=t1, kind="mixed")


STEPS = [_step(1, 0.00, 0.06), _step(2, 0.06, 0.12), _step(3, 0.20, 0.26)]   # 80 ms idle


def test_a_gap_over_an_idle_stretch_shows_what_fell_between_steps():
    (gap,) = long_gaps([(0, 0.05, 0.25)], STEPS, 0.0, over_ms=134)
    assert gap["stream"] == 0 and gap["from_ms"] == 50.0 and gap["ms"] == 200.0
    assert gap["steps"] == [1, 2, 3]
    assert gap["covered_ms"] == 120.0              # 10 + 60 + 50: 80 ms between steps


def test_gaps_within_the_bound_are_left_out():
    assert long_gaps([(1, 0.00, 0.12), (2, 0.12, 0.254)], STEPS, 0.0, over_ms=134) == []
