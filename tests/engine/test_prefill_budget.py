"""The prompt-reading budget while other conversations stream."""
from engine.core.prefill_budget import GRAIN, WARMUP_TOKENS, PrefillBudget


def test_whole_chunk_when_nobody_streams():
    assert PrefillBudget(512, 0.25).tokens(decoding=False) == 512


def test_small_warmup_budget_before_anything_is_measured():
    assert PrefillBudget(512, 0.25).tokens(decoding=True) == WARMUP_TOKENS


def test_budget_keeps_the_decode_slowdown_under_the_fraction():
    b = PrefillBudget(4096, 0.25)
    b.observe(0.040, decode_rows=7, prefill_tokens=0)        # 40 ms decode steps
    b.observe(1.0, decode_rows=0, prefill_tokens=8000)       # 8000 prompt tok/s alone
    tokens = b.tokens(decoding=True)
    assert tokens % GRAIN == 0
    assert tokens / 8000 <= 0.25 * 0.040                     # extra time <= 25% of a step
    assert tokens == 80


def test_mixed_steps_teach_the_prompt_rate():
    b = PrefillBudget(4096, 0.25)
    b.observe(0.040, decode_rows=4, prefill_tokens=0)
    b.observe(0.050, decode_rows=4, prefill_tokens=64)       # 10 ms for 64 tokens
    assert abs(b.prefill_tok_s - 6400) < 1e-6
    assert b.tokens(decoding=True) == 64


def test_budget_never_exceeds_the_chunk_or_drops_below_a_grain():
    b = PrefillBudget(128, 0.25)
    b.observe(1.0, 1, 0)
    b.observe(0.001, 0, 100000)
    assert b.tokens(True) == 128
    b.observe(0.040, 7, 0)                  # a CPU: prompt tokens cost like decode rows
    b.decode_s, b.prefill_tok_s = 0.040, 200.0
    assert b.tokens(True) == GRAIN          # a new prompt still moves
