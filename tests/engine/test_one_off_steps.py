"""What is learned from steps far over their prediction (engine/core/one_off_steps.py)."""
from engine.core.one_off_steps import MAX_SET_ASIDE, STALL_OVERRUN, OneOffSteps, is_one_off


def test_a_step_within_the_spread_is_learned_and_one_far_over_is_set_aside():
    steps = OneOffSteps()
    assert steps.readings(16, 0.031, 0.045, 0.045) == [0.031]
    assert steps.readings(16, 0.180, 0.195, 0.045) == []          # 4.3x: a one-off
    assert steps.readings(16, 0.032, 0.046, 0.045) == [0.032]     # the spread again
    assert not is_one_off(STALL_OVERRUN * 0.045, 0.045) and not is_one_off(1.0, None)


def test_one_more_one_off_in_a_row_is_the_cost_and_comes_with_those_set_aside():
    steps = OneOffSteps()
    aside = [steps.readings("calm", 0.3, 0.3, 0.014) for _ in range(MAX_SET_ASIDE)]
    assert aside == [[]] * MAX_SET_ASIDE
    assert steps.readings("calm", 0.31, 0.31, 0.014) == [0.3] * MAX_SET_ASIDE + [0.31]
    assert steps.readings(16, 0.2, 0.2, 0.045) == []              # keys are apart
