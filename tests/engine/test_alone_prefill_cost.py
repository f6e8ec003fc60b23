"""The least a chunk costs, from chunks read alone (engine/core/alone_prefill_cost.py)."""
from engine.core.alone_prefill_cost import RECENT, AlonePrefillCost


def test_nothing_read_alone_bounds_nothing():
    assert AlonePrefillCost().least_s(512) == 0.0


def test_a_shorter_chunk_costs_at_least_its_tokens_at_a_longer_ones_price():
    alone = AlonePrefillCost()
    alone.observe(512, 0.256)                 # 0.5 ms a token, its fixed part included
    assert alone.least_s(128) == 128 * 0.256 / 512
    assert alone.least_s(512) == 0.256


def test_a_chunk_longer_than_any_read_costs_at_least_the_longest():
    alone = AlonePrefillCost()
    alone.observe(64, 0.040)
    alone.observe(512, 0.256)
    assert alone.least_s(2048) == 0.256       # not 2048 tokens at 0.5 ms: that is a guess


def test_the_cheapest_reading_counts_and_a_stall_does_not_move_it():
    alone = AlonePrefillCost()
    alone.observe(512, 0.256)
    alone.observe(512, 3.0)                   # a first shape compiling
    alone.observe(256, 0.200)                 # a short chunk's fixed part: dearer a token
    assert alone.least_s(256) == 256 * 0.256 / 512
    assert alone.least_s(512) == 0.256


def test_old_readings_are_forgotten():
    alone = AlonePrefillCost()
    alone.observe(512, 0.100)
    for _ in range(RECENT):
        alone.observe(512, 0.256)
    assert alone.least_s(512) == 0.256
