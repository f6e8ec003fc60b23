"""The reading-pace policy on a pipelined GPU with a host and a device clock
(tests/engine/scripted_engine.py, HostAndDevice): a chunk's device time lands in its own
step, the next one, or both, by what is in flight. No timing: the clocks are scripted."""
from scripted_engine import FLOOR_S, HostAndDevice


def _h200_session25():
    """Session 25's H200 beside 7 streams (docs/bench/h200-session25-conc*_steps.jsonl):
    a calm step 13 ms on the device (12 ms to queue); a mixed step ~45 ms to queue
    whatever its chunk, and 25 ms + 0.45 ms a token on the device above the calm step
    (64 tokens back to back ~67 ms a step, 128 and a calm step ~110 ms the pair, 256
    ~150); the host waited in its queuing for most of a 256-token chunk (131-161 ms),
    for less than half of a 128-token one (~45 ms, the calm step after it ~60)."""
    def host_s(kind, tokens):
        return {"decode": 0.012, "mixed": 0.045}.get(kind, 0.010 + 0.0001 * tokens)

    def device_s(kind, tokens):
        if kind == "alone":
            return 0.015 + 0.00043 * tokens
        return 0.013 + (0.025 + 0.00045 * tokens if kind == "mixed" else 0.0)

    return HostAndDevice(host_s, device_s, lambda tokens: 0.010 if tokens >= 256 else 0.060,
                         decode_s=0.013, prefill_tok_s=2300)


def test_chunks_read_back_to_back_on_a_pipelined_gpu_are_priced_by_their_whole_cost():
    """Issue 21 on session 25's H200 shape (_h200_session25): a chunk's device time lands
    in its own step or the next by what is in flight. Two chunks read back to back were
    priced by a tail estimate moved from the second to the first, and a chunk's reading
    was believed before the step after it (already queued) said its tail: 128 tokens
    read at 36 to 127 ms above the calm step (80 in truth), a 256-token chunk in every
    prompt (157 ms a step: over twice the floor), and elsewhere 64 tokens and a calm
    step in turn for whole prompts (2.2-2.3x alone). A reading carries a provisional
    tail, its whole cost as known less its own step, until the step after it settles it
    (PrefillBudget._provisional_tail_s): 128 tokens and a calm step in turn, every
    prompt, no step over twice the floor."""
    eng = _h200_session25()
    t0 = eng.now
    eng.add(900, 2048)
    while 900 not in eng.first_token:
        eng.step()
    alone_s = eng.first_token[900] - t0
    for rid in range(7):                        # the bench's streams: 40, 120, 300 tokens
        eng.add(rid, (40, 120, 300)[rid % 3])
    for _ in range(30):
        eng.step()
    for rid in (100, 101, 102):
        t0 = eng.now
        steps = eng.read(rid, 2048)
        sizes = [p.prefill_tokens for p, _, _ in steps if p.decode]
        gaps = [sec for p, sec, _ in steps if p.decode]
        assert max(sizes) == 128, sizes
        first = sizes.index(128)
        assert first <= 6 and sizes[first::2] == [128] * len(sizes[first::2]), sizes
        assert set(sizes[first + 1::2]) == {0}, sizes      # a calm step after each
        assert max(gaps) <= 2 * FLOOR_S and sorted(gaps)[len(gaps) // 2] <= FLOOR_S, gaps
        assert not any(a.degraded for _, _, a in steps)
        assert (eng.first_token[rid] - t0) / alone_s < 1.95
        for _ in range(5):
            eng.step()
