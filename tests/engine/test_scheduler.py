"""The scheduler with a fake runner: no mlx, just the bookkeeping."""
from scripted_engine import run_plan

from engine.cache.cache_manager import CacheManager
from engine.config import EngineConfig
from engine.core.scheduler import Scheduler
from engine.core.sequence import Sequence, Status


def make(num_pages=64, page_size=4, max_num_seqs=4, chunk=8):
    cfg = EngineConfig(max_num_seqs=max_num_seqs, page_size=page_size, num_pages=num_pages,
                       prefill_chunk=chunk, max_context=1024)
    return Scheduler(cfg, CacheManager(num_pages, page_size, max_num_seqs, keep_turns=None,
                                       exact_prefix_only=False))


MAX_TOKENS: dict[int, int] = {}


def seq(rid, n_prompt, max_tokens=8):
    MAX_TOKENS[rid] = max_tokens
    return Sequence(rid, list(range(n_prompt)))


def fake_step(sched):
    """What the runner does: decode appends one token; the last prefill chunk samples one."""
    plan = sched.schedule()
    run_plan(plan)
    for s in list(sched.running):
        if len(s.output_ids) >= MAX_TOKENS[s.request_id]:
            sched.finish(s, "length")
    sched.cache.check_invariants()
    return plan


def test_decode_first_then_one_prefill_chunk():
    sched = make(chunk=8)
    a, b = seq(1, 5), seq(2, 20)
    sched.add(a)
    fake_step(sched)                  # a prefilled in one chunk
    sched.add(b)
    plan = fake_step(sched)
    assert [s.request_id for s in plan.decode] == [1]
    assert plan.prefills[0].seq is b and plan.prefills[0].num_tokens == 8
    plan = fake_step(sched)
    assert [s.request_id for s in plan.decode] == [1] and plan.prefills[0].start == 8
    fake_step(sched)                  # b's last chunk (4 tokens)
    plan = fake_step(sched)
    assert [s.request_id for s in plan.decode] == [1, 2] and not plan.prefills


def test_admission_respects_max_num_seqs_and_pool():
    sched = make(max_num_seqs=2, num_pages=64)
    for i in range(3):
        sched.add(seq(i, 3))
    for _ in range(4):
        fake_step(sched)
    assert len(sched.running) == 2 and len(sched.waiting) == 1
    small = make(num_pages=4, page_size=4)      # 3 usable pages = 12 tokens
    small.add(seq(1, 10))
    small.add(seq(2, 10))
    fake_step(small)
    assert len(small.running) == 1 and len(small.waiting) == 1


def test_preemption_frees_the_latest_and_the_pool_ends_whole():
    sched = make(num_pages=7, page_size=4, max_num_seqs=4)   # 6 usable pages
    a, b = seq(1, 7, max_tokens=12), seq(2, 7, max_tokens=12)
    sched.add(a)
    sched.add(b)
    preempted = []
    for _ in range(60):
        plan = fake_step(sched)
        preempted += plan.preempted
        if not sched.has_work:
            break
    assert b in preempted and b.num_preemptions >= 1
    assert a.status is Status.FINISHED and b.status is Status.FINISHED
    assert len(a.output_ids) == 12 and len(b.output_ids) == 12
    assert sched.cache.pages.num_free == sched.cache.pages.num_total
    assert sched.cache.slots.num_free == 4


def test_finish_of_waiting_running_and_prefilling_frees_everything():
    sched = make(chunk=4)
    seqs = [seq(i, 10) for i in range(3)]
    for s in seqs:
        sched.add(s)
    fake_step(sched)                     # seq 0 mid-prefill, others waiting
    assert seqs[0].is_prefilling
    for s in seqs:
        sched.finish(s, "cancelled")
    assert not sched.has_work
    assert sched.cache.pages.num_free == sched.cache.pages.num_total and sched.cache.slots.num_free == 4


def test_several_short_prompts_are_read_in_one_forward_within_the_budget():
    sched = make(chunk=32, max_num_seqs=8)
    for i, n in enumerate([5, 7, 6, 30]):
        sched.add(seq(i, n))
    plan = sched.schedule()
    assert [c.seq.request_id for c in plan.prefills] == [0, 1, 2, 3]
    width = max(c.num_tokens for c in plan.prefills)
    assert len(plan.prefills) * width <= 32
    long = plan.prefills[3]       # the long prompt fills the rest of the forward's width
    assert long.num_tokens == 7 and not long.is_last
    for c in plan.prefills:
        c.seq.num_computed = c.start + c.num_tokens
        if c.is_last:
            c.seq.output_ids.append(7)
    plan = sched.schedule()
    assert [c.seq.request_id for c in plan.prefills] == [3] and plan.prefills[0].start == 7


def test_budget_argument_limits_the_chunk():
    sched = make(chunk=64)
    sched.add(seq(1, 50))
    plan = sched.schedule(prefill_budget=16)
    assert plan.prefills[0].num_tokens == 16 and not plan.prefills[0].is_last


def test_preempting_with_tokens_in_flight_asks_for_them_first():
    sched = make(num_pages=4, page_size=4, max_num_seqs=2, chunk=16)   # 3 usable pages
    a, b = seq(1, 3, max_tokens=20), seq(2, 3, max_tokens=20)
    sched.add(a)
    sched.add(b)
    fake_step(sched)                      # both read their prompt: a page each
    fake_step(sched)                      # one decode: each now needs a second page
    b.pending.append(("on the device", 0))        # step n-1 sampled b's next token
    b.output_ids.pop()
    plan = sched.schedule()
    assert plan.resolve_first and plan.is_empty and not plan.preempted
    assert b.status is Status.RUNNING and b.num_preemptions == 0
    b.pending.clear()                     # the loop read step n-1 back
    b.output_ids.append(7)
    plan = sched.schedule()
    assert not plan.resolve_first and plan.preempted == [b]
    sched.cache.check_invariants()
