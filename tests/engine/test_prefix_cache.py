"""Finished turns kept for the next turn: bookkeeping, and the same output as no cache."""
from __future__ import annotations

import numpy as np
import pytest
from engine_harness import Harness
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import build_model, random_weights, tiny_config
from tiny_models import tiny_llama

from engine.cache.cache_manager import CacheManager
from engine.cache.prefix_cache import PrefixCache
from engine.core.sequence import Sequence

RNG = np.random.default_rng(3)
TURN1 = RNG.integers(0, 320, 13).tolist()
NEW_MESSAGE = RNG.integers(0, 320, 6).tolist()


def manager(exact: bool, keep_turns: int = 4) -> CacheManager:
    return CacheManager(33, 4, 4, keep_turns=keep_turns, exact_prefix_only=exact)


def admitted(m: CacheManager, rid: int, ids: list[int]) -> Sequence:
    seq = Sequence(rid, list(ids))
    assert m.can_allocate(seq)
    seq.num_computed = m.allocate(seq)
    return seq


def keep(m: CacheManager, rid: int, ids: list[int]) -> None:
    """A turn that read `ids` and finished: kept."""
    seq = admitted(m, rid, ids)
    seq.num_computed = len(ids)
    m.free(seq, keep=True)


def test_match_needs_the_whole_entry_when_the_state_cannot_rewind():
    for exact, expected in ((True, 0), (False, 6)):
        cache = PrefixCache(exact, 4)
        cache.put(list(range(10)), [1, 2, 3], 0)
        entry, n = cache.match(list(range(6)) + [99, 98, 97])
        assert n == expected and (entry is None) == (expected == 0)
        entry, n = cache.match(list(range(10)) + [5])
        assert n == 10


def test_a_prompt_equal_to_the_entry_leaves_one_token_to_read():
    cache = PrefixCache(False, 4)
    cache.put(list(range(8)), [1, 2], 0)
    assert cache.match(list(range(8)))[1] == 7


def test_allocate_frees_pages_past_the_reused_prefix():
    m = manager(exact=False)
    keep(m, 1, list(range(12)))
    seq = admitted(m, 2, list(range(5)) + [77])
    assert seq.num_computed == 5 and len(seq.pages) == 2 and seq.slot is not None
    assert m.pages.num_used == 2 and not m.prefix.entries
    assert not m.take_copies()                # nobody else holds the page it writes into
    m.check_invariants()


def test_a_shared_page_the_new_owner_writes_into_is_copied_in_the_next_plan():
    m = manager(exact=True)
    running = admitted(m, 1, list(range(6)))  # a running turn...
    assert not m.take_copies()                # (the plan that reads its prompt)
    running.num_computed = 6
    m.snapshot(running, 6)                    # ...whose prompt (6 tokens) is kept too
    later = admitted(m, 2, list(range(6)) + [9, 9])
    copies = m.take_copies()
    assert copies.states and copies.states[0][0] == running.slot
    assert later.slot == copies.states[0][1]
    assert copies.pages == [(running.pages[1], later.pages[1])]
    assert later.pages[0] == running.pages[0]
    assert m.pages.refcount(running.pages[1]) == 1 and m.pages.refcount(later.pages[1]) == 1
    m.check_invariants()


def test_lru_eviction_returns_pages_and_slots():
    m = manager(exact=True, keep_turns=2)
    for i in range(3):
        keep(m, i, [i] * 5)
    assert [e.ids[0] for e in m.prefix.entries] == [1, 2]       # the oldest went first
    m.check_invariants()
    m.clear()
    assert m.pages.num_used == 0 and m.slots.num_free == 4


def test_admission_evicts_kept_turns_when_the_pool_is_short():
    m = manager(exact=False, keep_turns=4)
    keep(m, 1, list(range(40)))               # 11 of 32 pages
    keep(m, 2, list(range(100, 140)))
    seq = admitted(m, 3, list(range(200, 270)))   # 18 pages: one kept turn must go
    assert len(m.prefix.entries) == 1 and m.prefix.entries[0].ids[0] == 100
    m.free(seq)
    m.check_invariants()


def test_check_invariants_catches_a_leak():
    m = manager(exact=False)
    seq = admitted(m, 1, list(range(9)))
    seq.pages.pop()                           # a page nobody holds any more
    with pytest.raises(AssertionError):
        m.check_invariants()


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
        assert_close(a, b, model_depth(model, second.num_tokens))


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
    assert h.loop.cache.prefix.entries
    seqs = [h.add(i, RNG.integers(0, 320, 9).tolist(), 12) for i in (2, 3)]
    h.run()
    assert all(len(s.output_ids) == 12 for s in seqs)
    # Two sequences of 21 tokens need all 12 pages: the kept turn had to go, nobody else.
    assert sum(s.num_preemptions for s in seqs) == 0
    assert all(e.ids[:len(TURN1)] != tuple(TURN1) for e in h.loop.cache.prefix.entries)


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
        assert_close(a, b, model_depth(model, second.num_tokens))


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
    h.loop.cache.clear()
    assert h.loop.cache.pages.num_free == h.loop.cache.pages.num_total


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
