"""Rates from StepEvents over a sliding window, for the status panel and the
self-test (no Qt; timestamps are the events' perf_counter seconds)."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StatsSnapshot:
    decode_tok_s: float = 0.0
    prefill_tok_s: float = 0.0
    per_request_tok_s: dict = field(default_factory=dict)   # request_id -> tok/s
    batch_size: int = 0              # rows of the last decode step; 0 once decoding went idle
    last_decode_batch: int = 0       # rows of the last decode step, however long ago
    kv_pages_used: int = 0
    kv_pages_total: int = 0
    num_waiting: int = 0
    max_batch_size: int = 0
    num_steps: int = 0
    degraded: bool = False           # a step in the window read a prompt in degraded mode


IDLE_S = 0.5     # no decode step for this long: the batch reads 0


class StepStats:
    def __init__(self, window_s: float = 2.0, clock=time.perf_counter):
        self.window_s = window_s
        self._clock = clock
        self._steps: deque = deque()
        self._last = None
        self._last_decode = None     # prefill-only steps (batch_size 0) do not replace it
        self.max_batch_size = 0
        self.num_steps = 0
        # Requests not streaming yet: "waiting" (queued) or "reading" (their prompt).
        self._phases: dict[int, str] = {}

    def phase(self, request_id: int) -> str:
        """'waiting' until the engine has read some of its prompt (a request no step has
        mentioned yet is still queued), 'reading' while it does, then 'streaming'."""
        return self._phases.get(request_id, "waiting")

    def forget(self, keep) -> None:
        """Drop the phases of requests no longer in flight (keep: the ones that are)."""
        self._phases = {rid: p for rid, p in self._phases.items() if rid in keep}

    def _note_phases(self, event) -> None:
        for rid in getattr(event, "waiting_request_ids", ()):
            self._phases[rid] = "waiting"
        for rid in event.prefill_request_ids:
            self._phases[rid] = "reading"
        for rid in event.decode_request_ids:
            self._phases[rid] = "streaming"

    def add_step(self, event) -> None:
        self._steps.append(event)
        self._last = event
        if event.batch_size > 0:
            self._last_decode = event
        self.num_steps += 1
        self._note_phases(event)
        self.max_batch_size = max(self.max_batch_size, event.batch_size)
        self._trim(event.t_end)

    def reset_max(self) -> None:
        self.max_batch_size = 0

    def _trim(self, now: float) -> None:
        while self._steps and self._steps[0].t_end < now - self.window_s:
            self._steps.popleft()

    def snapshot(self, now: float | None = None) -> StatsSnapshot:
        now = self._clock() if now is None else now
        self._trim(now)
        last, last_decode = self._last, self._last_decode
        last_batch = last_decode.batch_size if last_decode is not None else 0
        if not self._steps:
            return StatsSnapshot(kv_pages_used=getattr(last, "kv_pages_used", 0),
                                 kv_pages_total=getattr(last, "kv_pages_total", 0),
                                 last_decode_batch=last_batch,
                                 max_batch_size=self.max_batch_size, num_steps=self.num_steps)
        span = max(now - max(now - self.window_s, self._steps[0].t_start), 1e-3)
        decode = prefill = 0
        per_request: dict[int, int] = {}
        for step in self._steps:
            decode += step.batch_size
            prefill += step.prefill_tokens
            for rid in step.decode_request_ids:
                per_request[rid] = per_request.get(rid, 0) + 1
        idle = last_decode is None or now - last_decode.t_end > IDLE_S
        return StatsSnapshot(
            decode_tok_s=decode / span, prefill_tok_s=prefill / span,
            per_request_tok_s={rid: n / span for rid, n in per_request.items()},
            batch_size=0 if idle else last_batch, last_decode_batch=last_batch,
            kv_pages_used=last.kv_pages_used, kv_pages_total=last.kv_pages_total,
            num_waiting=last.num_waiting, max_batch_size=self.max_batch_size,
            num_steps=self.num_steps,
            degraded=any(getattr(s, "degraded", False) for s in self._steps))
