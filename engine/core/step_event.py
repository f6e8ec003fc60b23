"""The StepEvent of a finished step: what ran, how long, and the pool's state after it.

The status panel, the trace and the benchmarks read these; the step loop emits one per
step (its span is the cadence: from its start to the next step's start)."""
from __future__ import annotations

from engine.cache.cache_manager import CacheManager
from engine.core.scheduler import Scheduler, StepPlan
from engine.events import StepEvent


def step_event(step: int, plan: StepPlan, t0: float, t1: float, cache: CacheManager,
               scheduler: Scheduler, queue_s: float = 0.0, queue_cpu_s: float = 0.0,
               read_s: float = 0.0) -> StepEvent:
    kind = ("mixed" if plan.decode and plan.prefills
            else "decode" if plan.decode else "prefill")
    return StepEvent(
        step=step, t_start=t0, t_end=t1, kind=kind,
        decode_request_ids=tuple(s.request_id for s in plan.decode),
        prefill_request_ids=tuple(c.seq.request_id for c in plan.prefills),
        prefill_tokens=plan.prefill_tokens, batch_size=len(plan.decode),
        kv_pages_used=cache.pages.num_used, kv_pages_total=cache.pages.num_total,
        kv_pages_cached=cache.num_cached_pages,
        num_waiting=len(scheduler.waiting), num_running=len(scheduler.running),
        waiting_request_ids=tuple(s.request_id for s in scheduler.waiting),
        degraded=plan.degraded, queue_s=queue_s, queue_cpu_s=queue_cpu_s, read_s=read_s,
        predicted_s=plan.predicted_s, chunk_reason=plan.chunk_reason)
