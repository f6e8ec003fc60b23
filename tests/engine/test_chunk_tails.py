"""A chunk's device time split between its own step and the next (engine/core/
chunk_tails.py): the H200's session-15 steps fed to the budget, as the step loop feeds
them (queued before the step before it is observed); no timing."""
from test_prefill_policy_hiccups import ChunkOutlastsItsStep

from engine.core.alone_prefill_cost import OWN_FORWARD_SHARE
from engine.core.chunk_tails import ChunkTails
from engine.core.prefill_budget import PrefillBudget

FLOOR_S = 1 / 15.0
CALM_S = 0.014


def h200_budget() -> PrefillBudget:
    """7 streams at a 14 ms calm step, a 2,048-token prompt read alone in 1.05 s."""
    budget = PrefillBudget(512, min_stream_tok_s=15.0, max_slowdown=1.25,
                           alone_share=OWN_FORWARD_SHARE, pads_chunks=True)
    for _ in range(4):
        budget.queued(0, 512)
        budget.observe(0.262, 0, 512)
    for _ in range(10):
        budget.queued(7, 0)
        budget.observe(CALM_S, 7, 0)
    return budget


def feed(budget: PrefillBudget, steps) -> None:
    """(seconds, prompt tokens) steps beside 7 streams, in order, each queued before the
    one before it is observed (the step loop's pipeline); the last one stays in flight."""
    previous = None
    for seconds, tokens in steps:
        budget.queued(7, tokens)
        if previous:
            budget.observe(*previous)
        previous = (seconds, 7, tokens)


def test_tails_are_the_median_of_recent_readings_and_never_more_than_the_cost():
    tails = ChunkTails()
    assert tails.tail_s(128, 0.080) == 0.0          # never read: none
    for tail_s in (0.029, 0.030, 0.250, 0.028, -0.004):
        tails.observe(128, tail_s)
    assert tails.tail_s(128, 0.080) == 0.029        # a stall moves the median not at all
    assert tails.tail_s(128, 0.020) == 0.020
    assert tails.tail_s(None, 0.080) == 0.0


def test_a_length_not_read_yet_has_a_tail_grown_from_the_longest_shorter_ones():
    """The H200's tails (session 15) grow faster than their tokens: 64 tokens ~7 ms,
    128 ~28, 256 ~64. Taken as none, a banked 512-token chunk was followed by a calm
    step of 147 ms; in proportion to 128's, 256's would be 56 (under the 52 ms a calm
    step may carry) where it was 64."""
    tails = ChunkTails()
    assert tails.tail_s(256, 1.0) == 0.0               # nothing shorter read
    tails.observe(128, 0.028)
    assert abs(tails.tail_s(256, 1.0) - 0.056) < 1e-12   # in proportion
    tails.observe(64, 0.007)
    assert abs(tails.tail_s(256, 1.0) - (0.028 + 128 * 0.021 / 64)) < 1e-12
    assert tails.tail_s(32, 1.0) == 0.0
    assert tails.tail_s(512, 0.100) == 0.100            # never more than the cost
    assert not tails.known(256)


def test_a_chunk_whose_steps_each_fit_the_floor_is_read_though_its_cost_does_not():
    """Session 15 (docs/bench/h200-session15-conc2_steps.jsonl, round 2): a 128-token
    step took ~64 ms and the calm step after it ~43 (a ~79 ms cost over two steps, each
    within the 67 ms floor). Predicted as one 93 ms step, 128 tokens needed the bank
    and the policy read 64-token chunks between calm steps, half the pace. Split, 128
    tokens fit a step; the step after it carries the tail, so it is calm, not a 16-token
    chunk squeezed into a floor-long step."""
    budget = h200_budget()
    feed(budget, [(0.064, 128), (0.043, 0)] * 5)
    assert abs(budget.tails.tail_s(128, 1.0) - (0.043 - CALM_S)) < 1e-3
    assert budget.predicted_s(128) <= FLOOR_S
    assert budget.allowance(True, prompt_left=2048).tokens == 128
    budget.queued(7, 128)                           # in flight: its tail lands next
    assert budget.allowance(True, prompt_left=1920).tokens == 0


def test_a_chunk_read_right_after_another_is_not_charged_the_first_ones_tail():
    """A mixed step right after a 128-token one carries that chunk's ~29 ms tail: kept
    as its own cost, 32 tokens were priced above 64 (session 15, conc round 0: 32-token
    steps of 78-87 ms after 64-token ones). The known tail goes to the chunk it
    belongs to."""
    budget = h200_budget()
    feed(budget, [(0.064, 128), (0.043, 0)] * 5)
    feed(budget, [(0.064, 128), (0.070, 32)] * 5)   # 32 tokens: ~27 ms of its own
    cost_32 = budget.cost_line().extra_s(32)
    assert abs(cost_32 - (0.070 - 0.029 - CALM_S)) < 0.003, cost_32
    cost_128 = budget.cost_line().extra_s(128)
    assert abs(cost_128 - (0.064 + 0.029 - CALM_S)) < 0.003, cost_128


def test_the_h200s_costs_read_a_long_chunk_and_a_calm_step_in_turn():
    """The step loop's planning on session 15's costs: a chunk costs 18 ms + 0.46 ms a
    token above the 15 ms calm step, of which its own step holds 29 ms + 0.17 ms a
    token and the next step the rest. Every step stays within the floor, and 128-token
    chunks alternate with the calm steps that carry their tails."""
    eng = ChunkOutlastsItsStep(
        decode_s=0.015, prefill_tok_s=1950, chunk=512, alone_fixed_s=0.005,
        mixed_cost=lambda n: 0.018 + 0.46e-3 * n,
        tail=lambda n: max(0.0, (0.018 + 0.46e-3 * n) - (0.029 + 0.167e-3 * n)))
    eng.budget = PrefillBudget(512, 15.0, 1.25, OWN_FORWARD_SHARE, pads_chunks=True)
    eng.read(99, 2048)
    eng.streams()
    for _ in range(10):
        eng.step()
    for rid in (100, 101):      # (101 joins a batch of 9: the calm step is learned anew)
        eng.read(rid, 2048)
        for _ in range(4):
            eng.step()
    steps = eng.read(102, 2048)
    sizes = [p.prefill_tokens for p, _, _ in steps]
    assert sizes[:-1] == [128, 0] * 15, sizes
    assert all(sec <= FLOOR_S for p, sec, _ in steps if p.decode)
    assert not any(a.degraded for _, _, a in steps)


def test_a_length_whose_tail_was_never_read_is_followed_by_a_calm_step():
    """Session 15, each process's first prompt under load (docs/bench/h200-session15b-
    conc2_steps.jsonl, round 0): 128-token chunks back to back took 56-110 ms, each with
    the tail of the one before, and were priced at that; then 64, 32 and 16 tokens as
    dear: 20 steps of 16 tokens at 55 ms. A chunk whose length's tail is unknown is
    followed by a calm step, which reads it; after that the length is read in turn with
    the calm steps that carry its tail."""
    budget = h200_budget()
    first = budget.allowance(True, prompt_left=2048).tokens
    assert first > 0
    budget.queued(7, first)
    assert budget.allowance(True, prompt_left=2048 - first).tokens == 0
    budget.queued(7, 0)
    budget.observe(0.064, 7, first)
    second = budget.allowance(True, prompt_left=2048 - first).tokens
    assert second >= first
    budget.queued(7, second)
    budget.observe(0.043, 7, 0)                     # the calm step: the tail, read
    assert budget.tails.known(first)
    assert budget.cost_line().extra_s(first) > 0.064 - CALM_S + 0.025


def test_a_length_whose_tail_was_never_read_is_predicted_whole_in_its_own_step():
    """Its grown tail bounds the step after it, not its own (session 16: a 256-token
    chunk predicted at 67 ms, its grown tail taken out of its own step, took 187 ms)."""
    from engine.core.mixed_step_cost import CostLine
    from engine.core.step_predictions import StepPredictor
    tails = ChunkTails()
    for n, t in ((64, 0.007), (128, 0.028)):
        tails.observe(n, t)
    line = CostLine(0.02, 0.0004, True)
    predictor = StepPredictor(512, True, tails)
    assert predictor.tail_s(256, line) > 0          # the next step still carries a tail
    assert predictor.own_s(256, line) == line.extra_s(256)
    assert predictor.own_s(128, line) == line.extra_s(128) - 0.028   # a read tail: split


def test_a_reading_is_priced_whole_before_the_step_after_it_is_read():
    """The step after a chunk is queued before the chunk is read back, so the policy
    plans once with the chunk read and its tail not yet: priced by its own step alone,
    a 128-token chunk came out at ~50 ms where it costs ~80 (and twice that let 256
    in). Until the step after it settles it, a reading carries the tail its whole
    cost as known leaves over its own step, at most the longest tail its length was
    read with (PrefillBudget._provisional_tail_s)."""
    budget = h200_budget()
    feed(budget, [(0.064, 128), (0.043, 0), (0.054, 128), (0.043, 0)])
    # 128: 79 ms whole (a 29 ms tail); the second is read back (its own step 40 ms above
    # the calm step), the calm step after it is not (of two readings the lower counts)
    cost_128 = budget.cost_line().extra_s(128)
    assert abs(cost_128 - (0.054 + 0.029 - CALM_S)) < 0.002, cost_128


def test_a_chunk_whose_cost_landed_in_its_own_step_hands_no_tail_to_the_next():
    """On the H200 a 128-token chunk's own step was ~45 ms (the rest, ~50, in the next
    step) or ~95 (all of it, the host waiting in its queuing: session 25): the tails
    read after it are ~0 or ~50, and no estimate of them is right for both. A chunk
    right after one that took its whole cost in its own step carries none of it: its
    reading is its own step's, and the first keeps its cost."""
    budget = h200_budget()
    feed(budget, [(0.064, 128), (0.043, 0)] * 6              # 128: 79 ms whole, 29 tail
         + [(0.093, 128), (0.041, 32), (0.014, 0), (0.014, 0)])  # 128 whole in its step
    line = budget.cost_line()
    assert abs(line.extra_s(32) - (0.041 - CALM_S)) < 0.002, line.points
    assert abs(line.extra_s(128) - (0.093 - CALM_S)) < 0.002, line.points


def test_a_step_cheaper_than_its_line_moves_no_phantom_tail_to_the_next():
    """Where nothing spills into the next step (the CPU runs a step as it is queued;
    its tails read ~0), a chunk that came out under its predicted cost is just cheap:
    carrying the difference as a tail took it out of the next chunk's reading, that
    length came out cheap, and a pipelined CPU run read degraded chunks of 104-152
    tokens in steps 4x the calm step. A reading carries at most the longest tail its
    length was read with."""
    budget = h200_budget()
    feed(budget, [(0.093, 128), (0.014, 0)] * 6             # 128: 79 ms, all in its step
         + [(0.064, 128), (0.041, 32), (0.014, 0), (0.014, 0)])
    line = budget.cost_line()
    assert abs(line.extra_s(32) - (0.041 - CALM_S)) < 0.002, line.points
