"""TraceRecorder: records engine events and telemetry into a Perfetto-ready file.

Usage (the app's record toggle):

    rec = TraceRecorder()
    engine.add_listener(rec.on_event)       # engine thread
    monitor.add_listener(rec.on_reading)    # telemetry thread
    rec.start("~/tandem-trace.json")        # streaming: the file is valid from now on
    ...
    rec.stop()                              # final save; rec.save(other) exports a copy

Recording must be cheap enough to leave on, so the engine thread only
appends (receipt time, event) to a list under a lock; turning records into
JSON happens at flush or save time, on the flush thread or the caller's.
While streaming, the file is rewritten atomically (temp file + rename) every
few seconds, with the open request spans closed provisionally, so a crash
or a closed laptop leaves a valid trace; the same flush runs at interpreter
exit and when a recorder is dropped while recording.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from engine.events import ErrorEvent, FinishedEvent, StepEvent, SubmittedEvent, TokenEvent
from engine.telemetry.reading import Reading
from engine.telemetry.trace_format import TraceFormatter

_RECORDED = frozenset({StepEvent, SubmittedEvent, FinishedEvent, ErrorEvent, TokenEvent})
# A rewrite of the whole file grows with the recording; keep its share of
# one core (and of the GIL) under ~2% by spacing flushes by 50x their cost.
_FLUSH_COST_FACTOR = 50.0


class _Session:
    """Everything a recording owns; separate from TraceRecorder so the flush
    thread and the finalizer can hold it without keeping the recorder alive."""

    def __init__(self, path: Path | None, pid: int, process_name: str,
                 clock: Callable[[], float]) -> None:
        self.path = path
        self.clock = clock
        self.t0 = clock()
        self.lock = threading.Lock()          # guards records and seen_token (engine thread)
        self.records: list[tuple[float, object]] = []
        self.seen_token: set[int] = set()
        self.recording = False
        self.render_lock = threading.Lock()   # one formatter user and one writer at a time
        self.formatter = TraceFormatter(pid, self.t0, process_name)
        self.lines = [json.dumps(e) for e in self.formatter.metadata()]
        self.stopped = threading.Event()
        self.last_write_s = 0.0

    def drain(self) -> None:
        """Format records received since the last drain (caller holds render_lock)."""
        with self.lock:
            pending, self.records = self.records, []
        fmt, dumps = self.formatter.format, json.dumps
        for t, item in pending:
            self.lines.extend(dumps(e, allow_nan=False) for e in fmt(t, item))

    def render(self) -> str:
        with self.render_lock:
            self.drain()
            in_progress = self.recording
            closers = self.formatter.closing_events(
                self.clock(), "recording in progress" if in_progress else "recording stopped")
            events = self.lines + [json.dumps(e) for e in closers]
        other = {"clock": "time.perf_counter", "recording_in_progress": in_progress,
                 "recording_start_us": self.formatter.start_us}
        return ('{"displayTimeUnit": "ms", "otherData": ' + json.dumps(other)
                + ', "traceEvents": [\n' + ",\n".join(events) + "\n]}\n")

    def write(self, path: Path) -> Path:
        started = time.perf_counter()
        text = self.render()
        _atomic_write(path, text)
        self.last_write_s = time.perf_counter() - started
        return path


def _atomic_write(path: Path, text: str) -> None:
    """Write to a temp file beside `path`, then rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _flush_loop(session: _Session, interval_s: float) -> None:
    while not session.stopped.wait(max(interval_s, _FLUSH_COST_FACTOR * session.last_write_s)):
        if session.path is not None:
            try:
                session.write(session.path)
            except OSError:
                pass     # disk full or folder gone: keep recording, try again next time


def _final_flush(session: _Session) -> None:
    """Runs when a recording recorder is garbage-collected or the interpreter exits."""
    session.stopped.set()
    if session.recording and session.path is not None:
        try:
            session.write(session.path)
        except OSError:
            pass


class TraceRecorder:
    """Thread-safe recorder of engine events and telemetry readings.

    streaming: with a path, rewrite the file every `flush_interval_s`
    seconds while recording, so a recording in progress is a valid file.
    clock: must be the engine's event clock (time.perf_counter); tests pass
    a fake one to stamp receipt times deterministically.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, streaming: bool = True,
                 flush_interval_s: float = 2.0, process_name: str = "Tandem",
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be positive, got {flush_interval_s}")
        self.path = _as_path(path)
        self.streaming = streaming
        self.flush_interval_s = flush_interval_s
        self.process_name = process_name
        self.clock = clock
        self._s = _Session(None, os.getpid(), process_name, clock)
        self._finalizer: weakref.finalize | None = None
        self._thread: threading.Thread | None = None

    @property
    def is_recording(self) -> bool:
        return self._s.recording

    def start(self, path: str | os.PathLike | None = None) -> None:
        """Begin a new recording, discarding the previous one's events."""
        if self.is_recording:
            self.stop()
        if path is not None:
            self.path = _as_path(path)
        self._s = _Session(self.path, os.getpid(), self.process_name, self.clock)
        self._s.recording = True
        self._finalizer = weakref.finalize(self, _final_flush, self._s)
        if self.streaming and self.path is not None:
            self._s.write(self.path)       # valid (empty) file at once; fails early on a bad path
            self._thread = threading.Thread(target=_flush_loop, name="tandem-trace-flush",
                                            args=(self._s, self.flush_interval_s), daemon=True)
            self._thread.start()

    def stop(self) -> Path | None:
        """End the recording; saves to the recording's path if it has one."""
        s = self._s
        if not s.recording:
            return None
        s.recording = False            # on_event drops from here on
        s.stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return s.write(self.path) if self.path is not None else None

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the trace so far (recording or not) atomically; returns the path."""
        target = _as_path(path) or self.path
        if target is None:
            raise ValueError("no path: pass one to save() or to the TraceRecorder")
        return self._s.write(target)

    def flush(self) -> None:
        """Rewrite the streaming file now (what the flush thread does periodically)."""
        if self._s.recording and self.path is not None:
            self._s.write(self.path)

    def to_dict(self) -> dict:
        """The trace as it would be saved now."""
        return json.loads(self._s.render())

    def on_event(self, ev: object) -> None:
        """Engine listener: cheap, called on the engine thread for every event."""
        s = self._s
        if not s.recording or type(ev) not in _RECORDED:
            return
        t = s.clock()
        with s.lock:
            if type(ev) is TokenEvent:
                # Only the first token of a request is drawn; dropping the rest
                # here keeps memory flat over a long recording.
                if ev.request_id in s.seen_token:
                    return
                s.seen_token.add(ev.request_id)
            elif type(ev) is FinishedEvent:
                s.seen_token.discard(ev.request_id)
            s.records.append((t, ev))

    def on_reading(self, reading: Reading) -> None:
        """Telemetry listener: GPU MHz and W become counter tracks."""
        s = self._s
        if s.recording:
            with s.lock:
                s.records.append((reading.t, reading))


def _as_path(path: str | os.PathLike | None) -> Path | None:
    return None if path is None else Path(path).expanduser()
