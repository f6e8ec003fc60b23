"""The least a chunk costs, from chunks read alone (engine/core/alone_prefill_cost.py)."""
from engine.core.alone_prefill_cost import RECENT, AlonePrefillCost


def read(alone, tokens, *seconds):
    for s in seconds:
        alone.observe(tokens, s)
    return alone


def test_nothing_read_alone_bounds_nothing():
    assert AlonePrefillCost().least_s(512) == 0.0


def test_a_length_read_alone_once_bounds_nothing():
    """Its one reading may be its compile: a chat's first prompt after a cold start (32
    tokens in 3 s) would call every chunk seconds dear."""
    alone = read(AlonePrefillCost(), 32, 3.0)
    assert alone.least_s(16) == 0.0 and alone.least_s(512) == 0.0
    read(alone, 32, 0.020)                    # read again: the lower reading counts
    assert alone.least_s(16) == 16 * 0.020 / 32


def test_a_shorter_chunk_costs_at_least_its_tokens_at_a_longer_ones_price():
    alone = read(AlonePrefillCost(), 512, 0.256, 0.256)    # 0.5 ms a token, fixed part in
    assert alone.least_s(128) == 128 * 0.256 / 512
    assert alone.least_s(512) == 0.256


def test_a_chunk_longer_than_any_read_costs_at_least_the_longest():
    alone = read(read(AlonePrefillCost(), 64, 0.040, 0.040), 512, 0.256, 0.256)
    assert alone.least_s(2048) == 0.256       # not 2048 tokens at 0.5 ms: that is a guess


def test_the_cheapest_reading_counts_and_a_stall_does_not_move_it():
    alone = read(AlonePrefillCost(), 512, 0.256, 3.0)       # a first shape compiling
    read(alone, 256, 0.200, 0.200)            # a short chunk's fixed part: dearer a token
    assert alone.least_s(256) == 256 * 0.256 / 512
    assert alone.least_s(512) == 0.256


def test_old_readings_are_forgotten():
    alone = read(AlonePrefillCost(), 512, 0.100, 0.100)
    read(alone, 512, *[0.256] * RECENT)
    assert alone.least_s(512) == 0.256
