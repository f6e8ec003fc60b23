"""The reading-pace policy end to end without timing: a scripted clock gives every
step its cost (calm decode seconds + prompt tokens / prompt rate) and the budget
learns from those, as the step loop's would; the scheduler plans from the budget
(tests/engine/scripted_engine.py)."""
from scripted_engine import FLOOR_S, ScriptedEngine, assert_reading_pace, mixed

from engine.config import EngineConfig
from engine.core.chunk_choice import PROBE_NEW
from engine.core.prefill_budget import PrefillBudget
from engine.core.shapes import MIN_CHUNK, chunk_lengths


def test_gpu_prompt_chunks_fill_the_time_up_to_the_floor():
    eng = ScriptedEngine(decode_s=0.031, prefill_tok_s=2000)
    eng.streams()
    during = mixed(eng.read(100, 2048))
    # (66.7 ms - 31 ms) x 2000 tok/s = 71 -> the set's 64; the last chunk is what is left
    assert {p.prefill_tokens for p, _, _ in during[:-1]} == {64}
    assert all(sec <= FLOOR_S for _, sec, _ in during)
    assert not any(a.degraded for _, _, a in during)


def test_a_fast_prompt_rate_is_read_in_few_large_chunks():
    eng = ScriptedEngine(decode_s=0.031, prefill_tok_s=40000, pipelined=False)
    eng.streams()
    during = mixed(eng.read(100, 2048))
    # a cautious first chunk, then x2 a step (the max-gap cap: a length never read is
    # at most twice the longest read) up to what fits the floor
    assert [p.prefill_tokens for p, _, _ in during] == [64, 128, 256, 512, 1024, 64]
    assert all(sec <= FLOOR_S for _, sec, _ in during)


def test_every_planned_chunk_comes_from_the_fixed_set():
    eng = ScriptedEngine(decode_s=0.020, prefill_tok_s=3300)
    eng.streams()
    during = mixed(eng.read(100, 3000))
    assert all(p.prefill_tokens in chunk_lengths(2048) for p, _, _ in during[:-1])
    assert during[-1][0].prefills[0].is_last


def test_cpu_degrades_to_the_smallest_chunk_and_says_so():
    eng = ScriptedEngine(decode_s=0.040, prefill_tok_s=250)   # a token costs 4 ms
    eng.streams()
    during = mixed(eng.read(100, 256))
    assert [p.prefill_tokens for p, _, _ in during] == [MIN_CHUNK] * 16
    # the smallest chunk is measured twice before the mode starts (one reading may be
    # a spike): its first three steps, as the loop reads a step back after the next is
    # planned (with a calm step after the first, which reads its tail: engine/core/
    # chunk_tails.py), then every step says so
    assert [a.degraded for _, _, a in during] == [False] * 3 + [True] * 13
    # bounded: the streams' step is the calm step plus one smallest chunk, no more
    assert max(sec for _, sec, _ in during) <= 0.040 + MIN_CHUNK / 250 + 1e-9


def test_slow_calm_step_degrades_to_a_bounded_relative_slowdown():
    eng = ScriptedEngine(decode_s=0.200, prefill_tok_s=1000)  # calm pace 5 tok/s < floor
    eng.streams()
    during = mixed(eng.read(100, 512))
    assert all(a.degraded for _, _, a in during)
    assert all(sec <= 0.200 * 1.25 + 1e-9 for _, sec, _ in during)


def test_no_degraded_flag_without_streams():
    eng = ScriptedEngine(decode_s=0.200, prefill_tok_s=1000)
    steps = eng.read(1, 4096)
    assert [p.prefill_tokens for p, _, _ in steps] == [2048, 2048]
    assert not any(a.degraded for _, _, a in steps)


def test_new_prompt_first_chunk_within_the_turn_limit():
    eng = ScriptedEngine(decode_s=0.031, prefill_tok_s=2000, turn=4)
    eng.streams()
    eng.add(100, 4096)                    # a long prompt: 64 chunks of 64
    for _ in range(10):
        eng.step()
    arrived = len(eng.steps)
    eng.add(101, 40)                      # a short new conversation
    while 101 not in eng.first_token:
        eng.step()
    eng.step()
    first = next(i for i, (p, _, _) in enumerate(eng.steps)
                 if any(c.seq.request_id == 101 for c in p.prefills))
    assert first - arrived < 4            # within prefill_turn_chunks steps of arriving
    # and the long prompt resumes right after it
    assert eng.steps[first + 1][0].prefills[0].seq.request_id == 100


def test_three_prompts_all_get_turns():
    eng = ScriptedEngine(decode_s=0.031, prefill_tok_s=2000, turn=2)
    eng.streams()
    for rid in (100, 101, 102):
        eng.add(rid, 1024)
    for _ in range(10):
        eng.step()
    # (one calm step after the first chunk reads its tail: engine/core/chunk_tails.py)
    leads = [p.prefills[0].seq.request_id for p, _, _ in eng.steps[-10:] if p.prefills]
    assert leads == [100, 100, 101, 100, 100, 102, 100, 100, 101]


def test_a_fixed_cost_per_mixed_step_does_not_lock_the_chunk_small():
    """Issue 21: a mixed step pays 25 ms whatever its chunk, then 0.02 ms a token, as a
    chunk read alone does; the alone rate of the streams' 448 tokens (13,000 tok/s, the
    fixed part included) says little about a longer chunk. Charging the fixed part to the tokens
    kept a policy at 64-token chunks forever (the best is 512: 25 + 0.02 x 512 = 35 ms of
    the 36.7 ms above the calm step). The chunks grow to it within a few steps."""
    eng = ScriptedEngine(decode_s=0.030, prefill_tok_s=50000, mixed_fixed_s=0.025,
                         alone_fixed_s=0.025, pipelined=False)
    eng.streams()
    steps = eng.read(100, 8192)
    during = mixed(steps)
    sizes = [p.prefill_tokens for p, _, _ in during]
    # 512 fits the floor (35 ms); with the fixed cost 2048 reads 2.1x faster a token
    # (66 ms above the calm step): banked steps of 2048 between calm ones, reached
    # within a few steps (the first 64-token step came out 5x its alone-rate prediction,
    # so it is read twice before it is believed; a length never read is capped for the
    # max gap at twice the longest read, so the chunk doubles a step)
    assert sizes[:6] == sorted(sizes[:6]) and set(sizes[6:-1]) == {2048}, sizes
    assert not any(a.degraded for _, _, a in during)
    assert_reading_pace(steps)


def test_degraded_mode_does_not_stay_at_the_smallest_chunk_when_larger_costs_the_same():
    """The fixed part alone overruns the floor (40 ms above a 30 ms calm step): degraded.
    Without an alone rate the first 16-token chunk looks like 2.5 ms a token; a probe
    finds that tokens are nearly free, and the chunk grows within the degraded step."""
    eng = ScriptedEngine(decode_s=0.030, prefill_tok_s=100000, mixed_fixed_s=0.040,
                         alone_fixed_s=0.040)
    eng.streams()
    eng.budget.prefill_tok_s = None          # no alone measurement to bound the slope
    for _ in range(2):                       # its smallest chunk was measured
        eng.budget.mixed.observe(16, 0.040 + 16 / 100000)
    during = mixed(eng.read(100, 4096))
    sizes = [p.prefill_tokens for p, _, _ in during]
    assert sizes[0] == 32 and max(sizes) >= 256, sizes
    assert all(a.degraded for _, _, a in during)


def test_a_cost_that_saturates_with_the_tokens_is_followed_not_a_line():
    """On an MoE model a chunk's cost rises steeply until its tokens have touched most
    experts, then slowly: 30 ms x min(n, 96) / 96 + 0.01 ms a token. Beside a 30 ms calm
    step the floor leaves 36.7 ms: 256 tokens (32.6 ms) fit, 512 (35.1 ms) too; a line
    through small chunks would call 512 far too dear, one through large ones would call
    32 cheap. Every step after the first few stays within the floor."""
    def cost(n):
        return 0.030 * min(n, 96) / 96 + 1e-5 * n
    eng = ScriptedEngine(decode_s=0.030, prefill_tok_s=4000, mixed_cost=cost, chunk=512,
                         pipelined=False)
    eng.streams()
    steps = eng.read(100, 8192)
    during = mixed(steps)
    sizes = [p.prefill_tokens for p, _, _ in during]
    # 64 first, then 128 (a line through 64 and 128 calls 256 dear); the line also calls
    # 256 much cheaper a token than 128 (its fixed part), so the banked streams' time
    # buys 256, measured within the floor after all, then 512 (the flat segment's
    # extrapolation): every step within the floor (PROBE_EVERY's probe not needed)
    assert sizes[:4] == [64, 128, 256, 512] and set(sizes[4:-1]) == {512}, sizes
    assert all(sec <= FLOOR_S + 1e-9 for _, sec, _ in during)
    assert_reading_pace(steps)


def test_the_default_degraded_mode_keeps_a_stream_within_its_slowdown():
    """A 2-core CPU: a 140 ms calm step (slower than the floor) and 4.3 ms a prompt token.
    The default max_decode_slowdown (1.25) lets a step reach 2.25x the calm one (issue 21
    promises at most 2.5x): a 200-token prompt is read at least 16 tokens a step beside
    the calm step's 140 ms (at 0.25 its first chunk cost more than the step allowed it:
    always the smallest, and 2.5x the wait)."""
    slowdown = EngineConfig().max_decode_slowdown
    assert 1 + slowdown <= 2.5
    eng = ScriptedEngine(decode_s=0.140, prefill_tok_s=230, slowdown=slowdown)
    eng.streams(3)
    during = mixed(eng.read(100, 200))
    assert all(a.degraded for _, _, a in during)
    assert all(sec <= (1 + slowdown) * 0.140 + 1e-9 for _, sec, _ in during)
    assert min(p.prefill_tokens for p, _, _ in during[:-1]) >= 16


def test_a_length_whose_second_reading_is_lower_takes_it():
    from engine.core.mixed_step_cost import MixedStepCost
    cost = MixedStepCost()
    cost.observe(64, 0.150)        # compiled its kernels
    cost.observe(64, 0.050)
    assert cost.line(None).extra_s(64) == 0.050
    cost.observe(64, 0.052)
    assert cost.line(None).extra_s(64) == 0.052     # the median of the recent readings
    cost.observe(64, 0.300)        # a one-off stall (the H200, session 11: 2.3x) ...
    cost.observe(64, 0.049)
    assert cost.line(None).extra_s(64) == 0.052     # ... moves it not at all
    for _ in range(3):             # a cost that really changed is followed in 3 steps
        cost.observe(64, 0.100)
    assert cost.line(None).extra_s(64) == 0.100


def test_a_cost_flat_over_small_chunks_is_not_extrapolated_four_lengths_up():
    """The H200 (session 6): a step bound by the host costs about the same for 16 to 64
    tokens (~40 ms above a 21 ms calm step), then ~0.9 ms a token more. A line through
    16 and 32 is nearly flat, and its slope was extrapolated up to 4x the longest
    measured: 128 tokens called cheap, read twice at 119 ms, and the line through 16,
    32 and 128 then put 64 out of reach: 32-token chunks, 58 steps for the prompt. Now
    the line's slope reaches only the next length up (past it, the alone rate): 64
    first, 128 tried (under twice the floor), then 64 again, 30 steps; 128, read once
    (the lower of its first two readings), is read once more after PROBE_EVERY steps
    (one reading may be a spike), then no more."""
    def cost(n):
        return 0.039 + 1.5e-5 * min(n, 64) + 0.0009 * max(0, n - 64)
    eng = ScriptedEngine(decode_s=0.021, prefill_tok_s=1930, mixed_cost=cost, chunk=512)
    eng.streams()
    for n in (16, 32):                    # measured before, beside these streams
        eng.budget.mixed.observe(n, cost(n))
    during = mixed(eng.read(100, 2048))
    sizes = [p.prefill_tokens for p, _, _ in during]
    assert 256 not in sizes and 512 not in sizes, sizes
    assert all(sec <= 2 * FLOOR_S for _, sec, _ in during), sizes
    assert sum(sec > FLOOR_S for _, sec, _ in during) <= 3, sizes
    assert sizes.count(64) >= len(sizes) - 4, sizes           # the chunk that fits
    assert len(sizes) <= 32, sizes


def test_a_fixed_cost_per_chunk_is_paid_for_from_the_streams_bank():
    """Issue 21, the H200 (session 8, docs/bench/h200-session8-2026-12-02.txt): 7 streams
    with a 20 ms calm step, a chunk 25 ms + 0.45 ms a token above it. Within the floor only
    32 tokens fit a step (59 ms): a 2,048-token prompt took 63 steps, 3.5x its time alone
    (1,900 tok/s). A 128-token chunk costs 103 ms but reads a token 2x cheaper; after a calm
    step the streams have banked enough for it: 128-token steps between calm ones, each
    within 1.75x the floor, the streams' average within the floor: 1.9x alone."""
    eng = ScriptedEngine(decode_s=0.020, prefill_tok_s=1900, chunk=512,
                         mixed_cost=lambda n: 0.025 + 0.45e-3 * n)
    eng.streams(7)
    t0 = eng.now
    steps = eng.read(100, 2048)
    sizes = [p.prefill_tokens for p, _, _ in steps]
    # the first two: the first measurement, twice (the second planned before the first
    # is read back)
    assert set(sizes[2:-1]) == {0, 128} and sizes.count(128) >= 15, sizes
    assert all(a or b for a, b in zip(sizes, sizes[1:]))    # calm steps never two in a row
    # the pace from the first step planned with a reading back (the first two are
    # predicted from the alone rate: 54 ms, and took 74)
    assert_reading_pace(steps[2:])
    assert (eng.first_token[100] - t0) / (2048 / 1900) < 1.9


def test_a_short_prompt_is_read_at_once_not_banked_for():
    """A prompt that fits the floor's chunk is read in the next step, whatever a longer
    chunk would save: the bank is for long prompts."""
    eng = ScriptedEngine(decode_s=0.020, prefill_tok_s=1900, chunk=512,
                         mixed_cost=lambda n: 0.025 + 0.45e-3 * n)
    eng.streams(7)
    eng.read(100, 600)                       # the cost line learned
    steps = eng.read(101, 30)
    assert [p.prefill_tokens for p, _, _ in steps][0] == 30


def test_a_bank_that_does_not_fill_never_starves_the_prompt():
    """Calm steps that come out slower than the budget's average (here the scripted calm
    step is just under the floor while the budget believes 20 ms) bank nearly nothing:
    after MAX_BANKING calm steps the floor's chunk is read anyway, so the prompt moves."""
    from engine.core.prefill_budget import MAX_BANKING
    eng = ScriptedEngine(decode_s=0.020, prefill_tok_s=1900, chunk=512,
                         mixed_cost=lambda n: 0.025 + 0.45e-3 * n)
    eng.streams(7)
    eng.read(100, 600)                       # the cost line learned
    eng.decode_s = FLOOR_S - 0.001           # calm steps now bank 1 ms each
    eng.budget.bank_s = 0.0
    steps = eng.read(101, 2048)
    sizes = [p.prefill_tokens for p, _, _ in steps]
    longest_wait = max(len(run) for run in "".join("0" if n == 0 else "x" for n in sizes)
                       .split("x"))
    assert longest_wait <= MAX_BANKING, sizes


def test_on_this_cpu_a_prompt_is_read_in_chunks_that_fill_the_degraded_bound():
    """This CPU's costs (docs/PERFORMANCE.md: 3 streams, calm ~150 ms, a chunk 45 ms +
    3.3 ms a token above it, degraded mode): a 200-token prompt read as 6 x 32 + 8 paid
    a whole step for its last 8 tokens. 40 tokens fit the step's bound too (45 + 132 ms
    above the calm step: 327 ms against 337.5; 48 would take 353), and nothing pads
    here, so every chunk is 40 (a multiple of 8 between the set's 32 and 64, since
    session 19; before, 5 x 32 and the prompt's rest with its last chunk): 5 steps,
    every one within the degraded mode's bound."""
    eng = ScriptedEngine(decode_s=0.150, prefill_tok_s=278, chunk=512, mixed_fixed_s=0.045,
                         mixed_tok_s=303, slowdown=1.25, alone_fixed_s=0.045)
    eng.streams(3)
    eng.read(100, 200)               # the first prompt measures the smallest chunk
    during = mixed(eng.read(101, 200))
    assert [p.prefill_tokens for p, _, _ in during] == [40] * 5
    assert all(sec <= 0.150 * (1 + 1.25) + 1e-9 for _, sec, _ in during)


def test_where_chunks_are_padded_the_prompts_rest_is_priced_at_its_padded_length():
    """The same world with the runner padding chunks to the set (a GPU's fixed shapes):
    40 tokens run as 64, which does not fit the bound, so the last 8 get their own step."""
    eng = ScriptedEngine(decode_s=0.150, prefill_tok_s=278, chunk=512, mixed_fixed_s=0.045,
                         mixed_tok_s=303, slowdown=1.25, alone_fixed_s=0.045)
    eng.budget = PrefillBudget(512, 15.0, 1.25, pads_chunks=True)
    eng.streams(3)
    eng.read(100, 200)
    during = mixed(eng.read(101, 200))
    assert [p.prefill_tokens for p, _, _ in during] == [32] * 6 + [8]


def test_a_cost_that_steps_up_between_lengths_is_probed_past():
    """The H200 (session 21, docs/bench/h200-session21-conc_steps.jsonl): beside 7 streams
    (17 ms calm step) a chunk cost 44 ms at 32 tokens, 76 at 64 and 87 at 128 above it:
    the MoE experts' kernel up to 32 tokens, the sorted matmuls' launches from 64. Every
    line through 16/32 and 64 priced 128 over the bank's room, so the first prompt was
    read at 32 and 64 for most of its length (2.7x its time alone). A next length never
    read, where the cost stepped up into this one faster than alone tokens cost, is read
    once (within twice the floor) after PROBE_NEW steps: 128 and a calm step in turn."""
    extra = {16: 0.035, 32: 0.044, 64: 0.076, 128: 0.087, 256: 0.143, 512: 0.260}
    eng = ScriptedEngine(decode_s=0.017, prefill_tok_s=1880, chunk=512,
                         mixed_cost=lambda n: extra[min(L for L in extra if L >= n)])
    eng.streams(7)
    t0 = eng.now
    steps = eng.read(100, 2048)
    sizes = [p.prefill_tokens for p, _, _ in mixed(steps)]
    first = sizes.index(128)
    assert first <= 2 + PROBE_NEW + 1, sizes
    assert set(sizes[first:-1]) == {128}, sizes     # 256 is never probed: 2x its bound
    assert_reading_pace(steps, probe_steps=1)
    # without the probe: 64 and a calm step in turn for the whole prompt, 3.3x alone
    assert (eng.first_token[100] - t0) / (2048 / 1880) < 2.2


def test_a_chunks_cost_landing_in_the_next_step_keeps_the_floor():
    """The H200's shape in session 24: the host queues a step while the device still runs
    the one before, so a chunk's cost past ~38 ms lands in the step after it (its tail,
    engine/core/chunk_tails.py); a chunk beside 7 streams costs 35 ms + 0.5 ms a token
    above their 12 ms calm step. The tail is learned from the calm step after a chunk,
    and every step, the tails included, stays within the floor."""
    eng = ScriptedEngine(decode_s=0.012, prefill_tok_s=1920, alone_fixed_s=0.017,
                         mixed_cost=lambda n: 0.035 + 0.0005 * n, own_max_s=0.038)
    eng.streams()
    steps = eng.read(100, 2048)
    assert all(sec <= FLOOR_S + 1e-9 for p, sec, _ in steps if p.decode)
    # not locked at the smallest chunk; a tail is not read again as a chunk's own cost
    assert min(p.prefill_tokens for p, _, _ in mixed(steps)[:-1]) >= 4 * MIN_CHUNK
    assert_reading_pace(steps)


def test_a_tail_step_just_over_the_floor_is_paid_by_its_own_steps_time_under_it():
    """Issue 21 on the H200's session-24 costs: a 128-token chunk's own step ~42 ms, its
    tail step ~68 (1 ms over the floor), the pair within two floors. Judged step by
    step, 128 tokens no longer fit once their tail was read and the policy fell back to
    64-token chunks, a calm step after each: 64 tokens per ~85 ms instead of 128 per
    ~110. The tail may take what its chunk's own step left under the floor
    (ChunkChoice.longest_within's loan), so 128 stays, and the pace holds."""
    eng = ScriptedEngine(decode_s=0.012, prefill_tok_s=2270, alone_fixed_s=0.017,
                         mixed_cost=lambda n: 0.035 + 0.0004 * n, own_max_s=0.030)
    eng.streams()
    t0 = eng.now
    steps = eng.read(100, 2048)
    sizes = [p.prefill_tokens for p, _, _ in mixed(steps)]
    # 128 probed once, then one 64 while the probe's tail is in flight (its whole cost
    # not known yet: predicted at 91 ms, all of it in its own step), then 128 for good;
    # the last chunk: the prompt's rest
    assert sizes[:3] == [64, 128, 64] and set(sizes[3:-1]) == {128}, sizes
    gaps = [sec for p, sec, _ in steps if p.decode]
    assert max(gaps) <= FLOOR_S + 0.002 and sum(gaps) / len(gaps) <= FLOOR_S
    assert eng.first_token[100] - t0 < 1.8          # 2.43 s at 64-token chunks
    assert_reading_pace(steps)

