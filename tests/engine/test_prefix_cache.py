"""Finished turns kept for the next turn: bookkeeping, and the same output as no cache."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from engine_harness import Harness
from qwen_fixtures import build_model, random_weights, tiny_config
from tiny_models import tiny_llama

from engine.cache.page_pool import PagePool, SlotPool
from engine.cache.prefix_cache import PrefixCache

RNG = np.random.default_rng(3)
TURN1 = RNG.integers(0, 320, 13).tolist()
NEW_MESSAGE = RNG.integers(0, 320, 6).tolist()


def make_cache(exact: bool, max_entries: int = 4):
    pool, slots = PagePool(33, 4), SlotPool(4)
    return PrefixCache(pool, slots, exact, max_entries), pool, slots


def test_match_needs_the_whole_entry_when_the_state_cannot_rewind():
    for exact, expected in ((True, 0), (False, 6)):
        cache, pool, slots = make_cache(exact)
        cache.put(list(range(10)), pool.allocate(3), slots.allocate())
        entry, n = cache.match(list(range(6)) + [99, 98, 97])
        assert n == expected and (entry is None) == (expected == 0)
        entry, n = cache.match(list(range(10)) + [5])
        assert n == 10


def test_a_prompt_equal_to_the_entry_leaves_one_token_to_read():
    cache, pool, slots = make_cache(exact=False)
    cache.put(list(range(8)), pool.allocate(2), slots.allocate())
    assert cache.match(list(range(8)))[1] == 7


def test_take_frees_pages_past_the_reused_prefix():
    cache, pool, slots = make_cache(exact=False)
    cache.put(list(range(12)), pool.allocate(3), slots.allocate())
    entry, n = cache.match(list(range(5)) + [77])
    pages, slot, copy = cache.take(entry, n)
    assert len(pages) == 2 and slot is not None and pool.num_used == 2 and not cache.entries
    assert copy is None                       # nobody else holds the page it writes into


def test_take_copies_a_shared_page_the_new_owner_writes_into():
    cache, pool, slots = make_cache(exact=True)
    running = pool.allocate(3)                # a running turn...
    pool.share(running[:2])                   # ...whose prompt (6 tokens) is kept too
    cache.put(list(range(6)), running[:2], slots.allocate())
    entry, n = cache.match(list(range(6)) + [9, 9])
    pages, _, copy = cache.take(entry, n)
    assert copy == (running[1], pages[1]) and pages[0] == running[0]
    assert pool.refcount(running[1]) == 1 and pool.refcount(pages[1]) == 1


def test_lru_eviction_returns_pages_and_slots():
    cache, pool, slots = make_cache(exact=True, max_entries=2)
    for i in range(3):
        cache.put([i] * 5, pool.allocate(2), slots.allocate())
    assert [e.ids[0] for e in cache.entries] == [1, 2]       # the oldest went first
    cache.clear()
    assert pool.num_used == 0 and slots.num_free == 4


MODELS = {"llama": lambda: tiny_llama(),
          "qwen3_5_moe": lambda: build_model(tiny_config("qwen3_5_moe"),
                                             random_weights(tiny_config("qwen3_5_moe"), 3))}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def test_next_turn_reads_only_its_new_tokens_and_matches_no_cache(model):
    h = Harness(model)
    first = h.add(1, TURN1, 5)
    h.run()
    turn2 = TURN1 + first.output_ids + NEW_MESSAGE
    second = h.add(2, turn2, 6)
    h.run()
    ref = Harness(model, prefix_cache=False)
    ref.add(2, turn2, 6)
    ref.run()
    assert second.num_cached >= len(TURN1) + len(first.output_ids) - 1
    assert second.output_ids == ref.seqs[2].output_ids
    for a, b in zip(h.logits[2], ref.logits[2]):
        assert mx.abs(a - b).max().item() < 1e-4


def test_a_branch_that_differs_inside_the_turn_is_still_right(model):
    h = Harness(model)
    h.add(1, TURN1, 4)
    h.run()
    branch = TURN1[:7] + [5, 6, 7] + NEW_MESSAGE          # an edited earlier message
    second = h.add(2, branch, 4)
    h.run()
    ref = Harness(model, prefix_cache=False)
    ref.add(2, branch, 4)
    ref.run()
    recurrent = bool(model.cache_spec().state_layers)
    assert second.num_cached == (0 if recurrent else 7)
    assert second.output_ids == ref.seqs[2].output_ids


def test_cached_turns_are_evicted_before_anyone_is_preempted(model):
    h = Harness(model, num_pages=13, page_size=4, max_num_seqs=2)   # 12 usable pages
    h.add(1, TURN1, 4)
    h.run()
    assert h.loop.scheduler.cache.entries
    seqs = [h.add(i, RNG.integers(0, 320, 9).tolist(), 12) for i in (2, 3)]
    h.run()
    assert all(len(s.output_ids) == 12 for s in seqs)
    # Two sequences of 21 tokens need all 12 pages: the kept turn had to go, nobody else.
    assert sum(s.num_preemptions for s in seqs) == 0
    assert all(e.ids[:len(TURN1)] != tuple(TURN1) for e in h.loop.scheduler.cache.entries)


def _hybrid():
    return build_model(tiny_config("qwen3_5_moe"), random_weights(tiny_config("qwen3_5_moe"), 3))


def test_a_recurrent_model_reuses_the_turn_boundary_when_the_answer_is_rendered_anew():
    """Templates may re-render the previous answer (Qwen3 drops its reasoning): the
    next prompt then starts with the previous prompt only, and the snapshot serves."""
    model = _hybrid()
    h = Harness(model)
    h.add(1, TURN1, 5)
    h.run()
    rerendered = [7, 7, 7]                                # not what the model generated
    turn2 = TURN1 + rerendered + NEW_MESSAGE
    second = h.add(2, turn2, 6)
    h.run()
    ref = Harness(model, prefix_cache=False)
    ref.add(2, turn2, 6)
    ref.run()
    assert second.num_cached == len(TURN1)
    assert second.output_ids == ref.seqs[2].output_ids
    for a, b in zip(h.logits[2], ref.logits[2]):
        assert mx.abs(a - b).max().item() < 1e-4


def test_a_snapshot_shared_with_a_running_turn_is_copied_before_it_is_written():
    """Pane B continues pane A's prompt while A still decodes: B writes into a copy of
    the page they share, so neither changes the other's output."""
    model = _hybrid()
    h = Harness(model, page_size=4)
    a = h.add(1, TURN1, 12)                               # 13 tokens: last page shared
    h.loop.step()                                         # A's prompt read, snapshot kept
    h.loop.step()
    b = h.add(2, TURN1 + NEW_MESSAGE, 8)
    h.run()
    assert b.num_cached == len(TURN1)
    for rid, prompt, n, seq in ((1, TURN1, 12, a), (2, TURN1 + NEW_MESSAGE, 8, b)):
        ref = Harness(model, prefix_cache=False, page_size=4)
        ref.add(rid, prompt, n)
        ref.run()
        assert seq.output_ids == ref.seqs[rid].output_ids
    h.loop.scheduler.cache.clear()
    assert h.loop.pool.num_free == h.loop.pool.num_total


def test_a_stopped_turn_is_kept_and_the_follow_up_matches_no_cache(model):
    h = Harness(model)
    first = h.add(1, TURN1, 50)
    for _ in range(6):                       # stop it mid-answer, a step in flight
        h.loop.step()
    h.loop.cancel(1)
    assert first.finish_reason == "cancelled" and len(first.output_ids) >= 2
    follow_up = TURN1 + first.output_ids + NEW_MESSAGE
    second = h.add(2, follow_up, 5)
    h.run()
    ref = Harness(model, prefix_cache=False)
    ref.add(2, follow_up, 5)
    ref.run()
    assert second.num_cached > len(TURN1)
    assert second.output_ids == ref.seqs[2].output_ids
