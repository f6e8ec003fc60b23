"""Issue 17 item 3 in the scheduler alone (no mlx): a sequence that needs more pages
than the pool has is handed back in StepPlan.exhausted, never left waiting."""
from __future__ import annotations

from scripted_engine import run_plan

from engine.cache.cache_manager import CacheManager
from engine.config import EngineConfig
from engine.core.scheduler import Scheduler
from engine.core.sequence import Sequence, Status


def make(num_pages=5, page_size=4, max_num_seqs=2, keep_turns=None):
    cfg = EngineConfig(max_num_seqs=max_num_seqs, page_size=page_size, num_pages=num_pages,
                       prefill_chunk=64, max_context=1024)
    return Scheduler(cfg, CacheManager(num_pages, page_size, max_num_seqs + 2,
                                       keep_turns=keep_turns, exact_prefix_only=False))


def step(sched):
    """The runner's part, and the step loop's ending of exhausted sequences."""
    plan = sched.schedule()
    assert not plan.resolve_first
    for s in plan.exhausted:
        sched.finish(s, "length")
    run_plan(plan)
    sched.cache.check_invariants()
    return plan


def run_until_idle(sched, limit=200):
    for n in range(limit):
        if not sched.has_work:
            return n
        step(sched)
    raise AssertionError("the scheduler never ran out of work: a sequence waits forever")


def test_a_lone_sequence_is_exhausted_when_the_pool_is_full():
    sched = make()                       # 4 pages of 4 tokens: 16 tokens
    a = Sequence(1, list(range(10)))
    sched.add(a)
    exhausted_at = None
    for _ in range(50):
        plan = step(sched)
        if plan.exhausted:
            exhausted_at = a.num_tokens
            break
    assert exhausted_at == 17 and a.status is Status.FINISHED
    assert a.finish_reason == "length" and sched.cache.pages.num_free == 4


def test_two_sequences_both_end_one_after_a_preemption():
    sched = make()
    a, b = Sequence(1, list(range(5))), Sequence(2, list(range(5)))
    sched.add(a)
    sched.add(b)
    run_until_idle(sched)
    assert a.is_finished and b.is_finished
    assert a.num_preemptions + b.num_preemptions >= 1
    assert {a.num_tokens, b.num_tokens} == {17}


def test_kept_turns_are_evicted_before_a_sequence_is_called_exhausted():
    sched = make(num_pages=9, keep_turns=4)          # 8 pages: 32 tokens
    old = Sequence(1, list(range(12)))
    sched.add(old)
    step(sched)
    step(sched)
    sched.finish(old, "stop")                         # kept: holds 4 pages
    assert sched.cache.num_cached_pages > 0
    new = Sequence(2, list(range(100, 110)))
    sched.add(new)
    run_until_idle(sched)
    assert new.num_tokens == 33                       # grew into the evicted pages
