"""The bench's decode measurement (engine/bench/runs.py) on scripted step events: it
times steady decode only, never the step that holds the prompts' reading (issue 23)."""
from __future__ import annotations

import math

from engine.bench.runs import ours_decode, steady_decode
from engine.events import StepEvent

CALM_S = 0.017


def _step(kind: str, batch: int, seconds: float = CALM_S, prefill: int = 0) -> tuple:
    return kind, batch, seconds, prefill


def _numbered(steps: list[tuple]) -> list[StepEvent]:
    """Step events numbered from 0, each lasting its seconds."""
    return [StepEvent(step=i, t_start=0.0, t_end=seconds, kind=kind,
                      batch_size=batch, prefill_tokens=prefill)
            for i, (kind, batch, seconds, prefill) in enumerate(steps)]


def test_the_first_step_of_all_rows_after_their_prompts_is_left_out():
    """B=16 as the H200 ran it: one step reads the 16 prompts (512 tokens), the first
    step of all 16 rows spans that reading's device time (~200 ms), then calm steps."""
    events = _numbered([_step("prefill", 0, 0.004, prefill=512), _step("decode", 16, 0.2)]
                       + [_step("decode", 16) for _ in range(5)])
    assert [e.step for e in steady_decode(events, 16)] == [2, 3, 4, 5, 6]


def test_rows_joining_beside_decode_and_a_prompt_between_are_left_out():
    """B=4: two rows read first, two more read beside them (mixed steps), then all four;
    a step that reads a prompt in between breaks the run again; rows that finished
    (fewer than 4) never count."""
    events = _numbered([
        _step("prefill", 0, prefill=64), _step("mixed", 2, prefill=32),
        _step("mixed", 3, prefill=32), _step("decode", 4, 0.3), _step("decode", 4),
        _step("decode", 4), _step("mixed", 4, prefill=16), _step("decode", 4, 0.1),
        _step("decode", 4), _step("decode", 3), _step("decode", 4)])
    assert [e.step for e in steady_decode(events, 4)] == [4, 5, 8]


class _ScriptedEngine:
    """Engine.generate's side the bench sees: step events to its listeners."""

    def __init__(self, events: list[StepEvent]):
        self.events, self.listeners, self.max_tokens = events, [], None

    def add_listener(self, fn):
        self.listeners.append(fn)

    def remove_listener(self, fn):
        self.listeners.remove(fn)

    def generate(self, prompts, sampling):
        self.max_tokens = sampling.max_tokens
        self.sampling = sampling
        for e in self.events:
            for fn in list(self.listeners):
                fn(e)


def test_ours_decode_times_the_first_steps_steady_steps():
    """The median and the slowest of the first `steps` steady steps; the step left out
    is reported apart, and the rows get tokens enough for `steps` steady steps even when
    every prompt takes two 16-token chunks to join."""
    calm = [0.02, 0.03, 0.018, 0.019]
    events = _numbered([_step("prefill", 0, prefill=256), _step("decode", 8, 0.11)]
                       + [_step("decode", 8, s) for s in calm] + [_step("decode", 8, 0.5)])
    engine = _ScriptedEngine(events)
    median, extra = ours_decode(engine, [[1] * 32] * 8, steps=4)
    assert math.isclose(median, (0.019 + 0.02) / 2)
    gc_pauses = {k: extra.pop(k) for k in ("gc_full", "gc_max_ms")}   # whatever ran
    state = {k: extra.pop(k) for k in ("mlx_cache_gb", "py_objects", "threads")}
    assert state["py_objects"] > 0 and state["threads"] >= 1 and state["mlx_cache_gb"] >= 0
    assert [e.duration for e in extra.pop("step_records")] == calm    # for RunLog's steps log
    # ... and the steps the rows joined in (at most LEAD_IN), the prompts' and the first full
    assert [(e.kind, e.step) for e in extra.pop("lead_in_records")] == [("prefill", 0),
                                                                        ("decode", 1)]
    assert extra == {"steps": 4, "slowest_s": 0.03, "first_full_s": 0.11,
                     "queue_ms": 0.0, "queue_cpu_ms": 0.0, "read_ms": 0.0,   # scripted: none
                     "slowest_at": 1, "slowest_queue_ms": 0.0, "slowest_queue_cpu_ms": 0.0,
                     "slowest_read_ms": 0.0, "slowest_prev_read_ms": 0.0,
                     "slowest_span": (0.0, 0.03)}
    assert gc_pauses["gc_full"] >= 0 and gc_pauses["gc_max_ms"] >= 0.0
    assert engine.max_tokens == 4 + 2 * 8 + 4 and engine.listeners == []


def test_the_bench_decodes_at_the_apps_sampling_when_asked():
    """`engine bench --sampling app`: both engines' decode runs sample as a new chat in
    the app does (its defaults, not a copy of them), greedy otherwise."""
    from engine.bench.suite import decode_sampling
    from engine.settings_spec import chat_defaults
    app = decode_sampling("app")
    assert app == {"temperature": chat_defaults()["temperature"],
                   "top_p": chat_defaults()["top_p"]}
    assert app["temperature"] > 0 and app["top_p"] < 1 and decode_sampling("greedy") is None
    engine = _ScriptedEngine(_numbered([_step("decode", 1, 0.01)] * 3))
    ours_decode(engine, [[1] * 32], steps=1, sampling=app)
    assert (engine.sampling.temperature, engine.sampling.top_p) == (0.7, 0.95)


def test_the_slowest_steps_split_is_its_own_not_the_medians():
    """Beside the medians, the slowest steady step's own queue / queue CPU / read times
    and where it came in the run: a queue spike with its CPU time is the host's work, a
    queue above its CPU time a wait, a long read the device's."""
    from engine.bench.runs import slowest_split
    steps = [StepEvent(step=i, t_start=0.0, t_end=d, kind="decode", batch_size=4,
                       queue_s=q, queue_cpu_s=c, read_s=r)
             for i, (d, q, c, r) in enumerate([(0.010, 0.006, 0.006, 0.001),
                                               (0.021, 0.017, 0.009, 0.002),
                                               (0.011, 0.007, 0.007, 0.001)])]
    assert slowest_split(steps) == {"slowest_at": 1, "slowest_queue_ms": 17.0,
                                    "slowest_queue_cpu_ms": 9.0, "slowest_read_ms": 2.0,
                                    "slowest_prev_read_ms": 1.0,   # step 0's: in its span
                                    "slowest_span": (0.0, 0.021)}
    assert "slowest_prev_read_ms" not in slowest_split(steps[1:])   # no step before it
    assert slowest_split([]) == {}
