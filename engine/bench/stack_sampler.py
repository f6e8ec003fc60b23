"""The engine thread's Python stack, sampled every few milliseconds, to say where a slow
step's time went (`engine bench --stacks MS`).

A slow decode step on the GPU machine shows as queue time with the CPU time to match (the
engine thread was busy, issue 23), but not which call it was busy in, and it comes once
in ~20 runs: too rare for a profiler's totals. Here a thread reads the engine thread's
frames (`sys._current_frames`) every interval into a ring with their perf_counter times,
and a run's slowest step is then matched to the samples taken while it was queued.

The innermost Python frame says which call the time went into (`mx.async_eval` in the
step loop: MLX walking and encoding the graph; `mx.array`: an upload; plain Python: the
step's own bookkeeping). A call that holds the GIL (MLX's native code may) lets no
sample in: the window then has fewer samples than its length allows and a long gap,
both reported. Diagnostics only: the sampler takes the GIL ~1000 times a second, so
it is off unless asked for, and nothing here belongs in a timing.
"""
from __future__ import annotations

import bisect
import collections
import os
import sys
import threading
import time

ENGINE_THREAD = "tandem-engine"      # engine/core/engine.py names its thread so
DEPTH = 6                            # frames kept a sample, innermost first


def thread_named(name: str) -> threading.Thread | None:
    return next((t for t in threading.enumerate() if t.name == name), None)


def _stack(frame, depth: int) -> str:
    """'func (file.py:line) < caller (file.py:line) < ...', innermost first."""
    parts = []
    while frame is not None and len(parts) < depth:
        code = frame.f_code
        parts.append(f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})")
        frame = frame.f_back
    return " < ".join(parts)


class StackSampler:
    """Samples the named thread's stack every `interval_s` until stopped (a context
    manager). The ring keeps the last `capacity` samples (~3 minutes at 1 ms)."""

    def __init__(self, thread_name: str = ENGINE_THREAD, interval_s: float = 0.001,
                 depth: int = DEPTH, capacity: int = 200_000):
        self.thread_name, self.interval_s, self.depth = thread_name, interval_s, depth
        self._times: collections.deque[float] = collections.deque(maxlen=capacity)
        self._stacks: collections.deque[str] = collections.deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StackSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="tandem-stack-sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        target = None
        while not self._stop.wait(self.interval_s):
            if target is None or not target.is_alive():
                target = thread_named(self.thread_name)
                if target is None:
                    continue
            frame = sys._current_frames().get(target.ident)
            if frame is None:
                continue
            stack = _stack(frame, self.depth)
            with self._lock:
                self._times.append(time.perf_counter())
                self._stacks.append(stack)

    def samples(self, t0: float, t1: float) -> list[tuple[float, str]]:
        """(time, stack) of every sample taken within [t0, t1]."""
        with self._lock:
            times, stacks = list(self._times), list(self._stacks)
        lo, hi = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)
        return list(zip(times[lo:hi], stacks[lo:hi]))

    def summary(self, t0: float, t1: float, top: int = 3) -> dict:
        """What the thread ran within [t0, t1]: its most sampled stacks with their
        counts, how many samples fell there against how many the interval allows, and
        the longest gap between samples (ms; the window's edges count as samples): a
        call that holds the GIL shows as few samples and one long gap."""
        got = self.samples(t0, t1)
        edges = [t0, *(t for t, _ in got), t1]
        gap = max((b - a for a, b in zip(edges, edges[1:])), default=0.0)
        counts = collections.Counter(s for _, s in got).most_common(top)
        return {"samples": len(got), "room": int((t1 - t0) / self.interval_s),
                "longest_gap_ms": round(1e3 * gap, 2),
                "stacks": [{"n": n, "stack": s} for s, n in counts]}
