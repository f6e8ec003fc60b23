"""The calm step's estimate is of one batch size (engine/core/calm_rows.py); no timing."""
from engine.core.alone_prefill_cost import MIXED_FORWARD_SHARE
from engine.core.calm_rows import SWITCH_READINGS, CalmRows
from engine.core.prefill_budget import PrefillBudget


def test_a_new_batch_size_takes_over_after_enough_of_its_calm_steps_agree():
    rows = CalmRows()
    assert rows.calm(1, 0.073) is None and rows.of(1)
    assert rows.calm(2, 0.110) is None and rows.of(1)
    assert rows.calm(3, 0.150) is None               # another size again: starts over
    assert rows.calm(3, 0.400) is None               # a one-off among them
    assert rows.calm(3, 0.155) == 0.155 and rows.of(3)
    assert rows.calm(3, 0.152) is None               # its own size: the caller learns it


def test_a_chunk_read_beside_a_batch_the_calm_step_is_not_of_is_no_reading():
    """This CPU, session 15: one stream calm at 73 ms; the next conversations' prompts
    read beside two rows took 231-300 ms for 16 tokens. Taken above the one-row calm
    step, 16 tokens cost 230 ms (really ~70), and degraded mode, allowed 2.25x the
    smallest chunk's cost, read 64-token chunks in 400 ms steps (2.6-2.8x calm)."""
    budget = PrefillBudget(512, 15.0, 1.25, alone_share=MIXED_FORWARD_SHARE)
    budget.observe(0.85, 0, 200)                      # a prompt alone
    for _ in range(5):
        budget.observe(0.073, 1, 0)
    for seconds in (0.231, 0.223):
        budget.observe(seconds, 2, 16)
    assert budget.mixed.count(16) == 0
    for _ in range(SWITCH_READINGS):
        budget.observe(0.150, 2, 0)
    assert budget.decode_s == 0.150
    budget.observe(0.222, 2, 16)
    assert abs(budget.cost_line().extra_s(16) - 0.072) < 1e-9


def test_each_batch_size_keeps_its_own_chunk_costs():
    """Conversations come and go: the costs learned beside three rows are there again
    when the batch comes back to three after an admission beside two."""
    budget = PrefillBudget(512, 15.0, 1.25, alone_share=MIXED_FORWARD_SHARE)
    budget.observe(0.85, 0, 200)
    for _ in range(5):
        budget.observe(0.150, 3, 0)
    budget.observe(0.150 + 0.140, 3, 32)
    for _ in range(SWITCH_READINGS):
        budget.observe(0.090, 2, 0)
    assert budget.mixed.count(32) == 0            # beside two rows: nothing read yet
    budget.observe(0.090 + 0.200, 2, 32)
    for _ in range(SWITCH_READINGS):
        budget.observe(0.150, 3, 0)
    assert abs(budget.cost_line().extra_s(32) - 0.140) < 1e-9
