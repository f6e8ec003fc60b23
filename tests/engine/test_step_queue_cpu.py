"""StepEvent.queue_cpu_s: the engine thread's CPU seconds while it queued a step, beside
the wall seconds (queue_s). A queue much longer than its CPU time waited inside it (the
bench prints both: engine/bench/runs.py), which tells a host that does more work a step
from one whose thread waits (docs/PERFORMANCE.md, B=1's two modes)."""
from __future__ import annotations

from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig
from engine.events import StepEvent

CFG = EngineConfig(num_pages=64, page_size=4, prefill_chunk=8, max_context=200)


def test_every_step_carries_its_queue_cpu_time_within_its_wall_time(tmp_path):
    events: list[StepEvent] = []
    with Engine.load(write_tiny_llama(tmp_path / "llama", seed=3), CFG) as engine:
        engine.add_listener(lambda e: events.append(e) if isinstance(e, StepEvent) else None)
        engine.generate(["hello world", "a second prompt"])
    steps = [e for e in events if e.kind == "decode"]
    assert steps
    # CPU time within the wall time (how much of it depends on the host's load: no ratio
    # here); thread_time's granularity is far finer than a millisecond on Linux and macOS
    assert all(0.0 < e.queue_cpu_s <= e.queue_s + 1e-3 for e in steps)
