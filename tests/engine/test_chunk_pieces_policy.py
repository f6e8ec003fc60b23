"""The real step loop and prefill budget on a scripted clock, with session 29's H100 costs
(docs/PERFORMANCE.md, issue 21): a chunk beside the streams costs a fixed part and its
tokens, so whole chunks fit the floor only short, and read in layer pieces
(EngineConfig.chunk_pieces) a step pays a K-th of a long chunk. A model of the costs, not
a measurement: the steps run the tiny model for real while a fake clock advances by what
each forward is scripted to cost, in lock-step (each step read back before the next)."""
from __future__ import annotations

import pytest
from engine_harness import Harness
from tiny_models import tiny_llama, tiny_llama_config

import engine.core.step_loop as step_loop

CALM_S = 0.013                  # a decode step of the streams (H100: 12-13 ms)
FIXED_S = 0.031                 # what any chunk beside them costs above it, and alone
TOKEN_S = 0.32e-3               # each token beside the streams (128: ~72 ms, 256: ~113)
ALONE_TOKEN_S = 0.275e-3        # each token read alone (512 tokens in ~172 ms)
FLOOR_S = 1 / 15
PROMPT = 2048


class Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _scripted(h: Harness, clock: Clock) -> None:
    """Each forward advances the clock by its scripted cost: a decode CALM_S, a chunk of
    n tokens FIXED_S + n TOKEN_S beside decode rows (ALONE_TOKEN_S alone), a piece of it
    its share of the layers."""
    runner, layers = h.loop.runner, len(h.loop.runner.model.layers)
    decode, prefill, piece = runner.decode, runner.prefill, runner.prefill_piece
    state = {"decoded": False}

    def chunk_s(chunks) -> float:
        n = sum(c.num_tokens for c in chunks)
        return FIXED_S + n * (TOKEN_S if state["decoded"] else ALONE_TOKEN_S)

    def timed_decode(seqs):
        clock.now += CALM_S
        state["decoded"] = True
        return decode(seqs)

    def timed_prefill(chunks):
        clock.now += chunk_s(chunks)
        return prefill(chunks)

    def timed_piece(chunks, span, carry=None, inputs=None):
        clock.now += chunk_s(chunks) * (span[1] - span[0]) / layers
        return piece(chunks, span, carry, inputs)

    step = h.loop.step

    def new_step():
        state["decoded"] = False
        step()
    runner.decode, runner.prefill, runner.prefill_piece = timed_decode, timed_prefill, timed_piece
    h.loop.step = new_step


def _ttft_and_gaps(pieces: int, streams: int, monkeypatch,
                   prompt_len: int = PROMPT) -> tuple[float, list[float], int]:
    """A prompt's (2,048 tokens by default) time to first token on the scripted clock, beside
    `streams` decoding conversations (none: alone), the streams' gaps while it was read,
    and how many steps were flagged degraded."""
    clock = Clock()
    monkeypatch.setattr(step_loop, "time", clock)
    h = Harness(tiny_llama(tiny_llama_config(num_hidden_layers=4)), max_num_seqs=8,
                page_size=16, num_pages=400, prefill_chunk=512, max_context=2600,
                fixed_shapes=True, pipeline_steps=False, mixed_forward=False,
                chunk_pieces=pieces, min_stream_tok_s=1 / FLOOR_S, prefix_cache=False)
    _scripted(h, clock)
    seqs = [h.add(i, [5 + i] * 24, 4000) for i in range(streams)]
    while not all(s.output_ids for s in seqs):
        h.loop.step()
    for _ in range(4):                              # calm steps: the budget learns c
        h.loop.step()
    start = clock.now
    prompt = h.add(99, [(7 * i) % 300 for i in range(prompt_len)], 1)
    while not prompt.output_ids:
        h.loop.step()
    ttft = clock.now - start
    # a step with decode rows gives each stream a token: its length is their gap
    gaps = [e.t_end - e.t_start for e in h.steps if e.t_start >= start and e.batch_size]
    degraded = sum(e.degraded for e in h.steps if e.t_start >= start)
    return ttft, gaps, degraded


@pytest.mark.parametrize("pieces", [1, 4])
def test_h100_costs_read_a_prompt_beside_streams_within_the_floor(pieces, monkeypatch):
    alone, _, _ = _ttft_and_gaps(pieces, 0, monkeypatch)
    loaded, gaps, degraded = _ttft_and_gaps(pieces, 3, monkeypatch)
    ratio = loaded / alone
    assert degraded == 0 and max(gaps) <= FLOOR_S * 1.05, (ratio, gaps)
    if pieces == 1:
        # whole chunks: c + F + n p <= f holds 64 tokens a step: ~2.9x alone
        assert ratio > 2.5, ratio
    else:
        # a 512-token chunk over 4 steps of c + (F + 512 p) / 4 ~ 62 ms: ~1.4x alone
        assert ratio < 1.6, ratio


def test_h100_costs_a_short_prompt_read_in_pieces_is_no_slower_than_whole(monkeypatch):
    """A 200-token prompt, one chunk: in pieces K steps of c + (F + n p) / K, so
    K c + F + n p = 52 + 31 + 64 = 147 ms against F + n a = 86 ms alone (1.71x); whole,
    the floor holds 64 tokens a step beside the streams (~2.8x). Pieces cost a short
    prompt K calm steps, and still read it sooner than the floor's short whole chunks."""
    ratios = {}
    for pieces in (1, 4):
        alone, _, _ = _ttft_and_gaps(pieces, 0, monkeypatch, prompt_len=200)
        loaded, gaps, degraded = _ttft_and_gaps(pieces, 3, monkeypatch, prompt_len=200)
        assert degraded == 0 and max(gaps) <= FLOOR_S * 1.05, gaps
        ratios[pieces] = loaded / alone
    assert ratios[4] < 1.8 < 2.5 < ratios[1], ratios
