"""TelemetryMonitor: samples a Sampler on its own thread and keeps a short history.

The monitor thread is the only caller of sampler.read(); the engine thread
never waits on it. Listeners are called from the monitor thread: the app's
bridge re-emits readings as a Qt signal, the TraceRecorder appends them.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from engine.telemetry.gpu import Sampler, make_sampler
from engine.telemetry.reading import Reading

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 10.0
HISTORY_S = 600.0       # the panel's sparklines show a minute; keep ten for exports

ReadingListener = Callable[[Reading], None]


class TelemetryMonitor:
    """Background sampling with latest(), history() and listener callbacks.

    interval_s: seconds between samples; 0.25-1.0 is the useful range (shorter
    and IOReport's residency deltas get noisy, longer and the sparkline lags).
    sampler: defaults to make_sampler(); a sampler the monitor made itself is
    closed by stop().
    """

    def __init__(self, interval_s: float = 0.5, sampler: Sampler | None = None) -> None:
        if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
            raise ValueError(f"interval_s must be in [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}], "
                             f"got {interval_s}")
        self.interval_s = interval_s
        self._owns_sampler = sampler is None
        self._sampler = sampler
        self._lock = threading.Lock()
        self._history: deque[Reading] = deque(maxlen=max(16, int(HISTORY_S / interval_s)))
        self._listeners: list[ReadingListener] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def sampler(self) -> Sampler:
        if self._sampler is None:
            self._sampler = make_sampler()
        return self._sampler

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start sampling; idempotent."""
        if self.is_running:
            return
        _ = self.sampler    # choose the sampler here, so errors surface in the caller
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tandem-telemetry", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop sampling and wait for the thread; idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self._owns_sampler and self._sampler is not None:
            self._sampler.close()
            self._sampler = None

    def add_listener(self, fn: ReadingListener) -> None:
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: ReadingListener) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def latest(self) -> Reading:
        """The newest reading, or an n/a placeholder before the first sample."""
        with self._lock:
            if self._history:
                return self._history[-1]
        return Reading.unavailable(time.perf_counter(), getattr(self._sampler, "source", "none"),
                                   "no sample yet")

    def history(self, seconds: float = 60.0) -> list[Reading]:
        """Readings from the last `seconds`, oldest first."""
        cutoff = time.perf_counter() - seconds
        with self._lock:
            return [r for r in self._history if r.t >= cutoff]

    def sample_once(self) -> Reading:
        """Take one sample now, record it and notify listeners (the thread's body)."""
        sampler = self.sampler
        try:
            reading = sampler.read()
        except Exception as exc:  # noqa: BLE001 -- a sampler bug must not kill the panel
            log.warning("telemetry sampler %s failed: %s", sampler.source, exc)
            reading = Reading.unavailable(time.perf_counter(), sampler.source,
                                          f"sampler error: {exc}", sampler.mhz_label)
        with self._lock:
            self._history.append(reading)
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(reading)
            except Exception:
                log.exception("telemetry listener %r failed", fn)
        return reading

    def _run(self) -> None:
        # Schedule against a fixed grid so the period does not drift by the
        # cost of each sample.
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.interval_s
            delay = next_t - time.perf_counter()
            if delay < 0:            # fell behind (laptop slept): restart the grid
                next_t, delay = time.perf_counter(), 0.0
            self._stop.wait(delay)
