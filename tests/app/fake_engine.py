"""A stand-in engine with the real Engine's API: a thread that decodes every
active request together each step and emits the same events (no mlx)."""
from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
from pathlib import Path

from engine.config import EngineConfig
from engine.errors import ModelLoadError
from engine.events import (
    FinishedEvent,
    LoadProgress,
    RequestStats,
    StepEvent,
    SubmittedEvent,
    TokenEvent,
)

REPLY = ("<think>The user wants a short answer.</think>Here is **an answer** with a list:\n\n"
         "- one\n- two\n\n```python\nprint('hi')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
         "And some more words to keep the stream going for a while longer.\n\n")
REPLY = REPLY + REPLY.split("</think>")[1] * 3


class FakeHandle:
    def __init__(self, engine, request_id, max_tokens):
        self.request_id = request_id
        self._engine = engine
        self.max_tokens = max_tokens
        self.events: queue.Queue = queue.Queue()
        self.cancelled = False
        self.generated = 0
        self.t_submit = time.perf_counter()
        self.t_first = None
        self.text = ""

    def cancel(self):
        self.cancelled = True

    def __iter__(self):
        while True:
            ev = self.events.get()
            yield ev
            if isinstance(ev, FinishedEvent):
                return


class FakeEngine:
    step_s = 0.01

    def __init__(self, model_name="fake-model", config=None):
        self.model_name = model_name
        self.config = config or EngineConfig()
        self.kernel_status = {"fake": "off: fake engine"}
        self.blas_status = {"name": "MLX bundled reference BLAS", "path": "",
                            "reason": "fake engine"}
        self.weights_status = {"mode": "quantized", "reason": "fake engine"}
        self._listeners = []
        self._active: list[FakeHandle] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = threading.Event()
        self._step = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, model=None, config=None, on_progress=None):
        if model is not None and (not Path(model).exists() or "broken" in str(model)):
            raise ModelLoadError(f"Cannot load {model}: config.json is missing. "
                                 "Pick a folder with config.json and *.safetensors.")
        for i in range(3):
            if on_progress:
                on_progress(LoadProgress(i / 2, f"loading part {i + 1}/3"))
        return cls(Path(model).name if model else "fake-default", config)

    def set_reading_pace(self, min_stream_tok_s):
        """Like Engine.set_reading_pace: the fake has no prompt budget, only the config."""
        self.config = dataclasses.replace(self.config, min_stream_tok_s=min_stream_tok_s)

    def add_listener(self, fn):
        self._listeners.append(fn)

    def remove_listener(self, fn):
        if fn in self._listeners:
            self._listeners.remove(fn)

    def submit(self, prompt, params):
        handle = FakeHandle(self, next(self._ids), params.max_tokens)
        with self._lock:
            self._active.append(handle)
        self._emit(None, SubmittedEvent(handle.request_id, time.perf_counter(), 8))
        return handle

    @property
    def kv_pages_used(self):
        with self._lock:
            return sum(1 + h.generated // self.config.page_size for h in self._active)

    def close(self):
        self._closed.set()
        self._thread.join(timeout=2)

    def _emit(self, handle, ev):
        if handle is not None:
            handle.events.put(ev)
        for fn in list(self._listeners):
            fn(ev)

    def _loop(self):
        while not self._closed.wait(self.step_s):
            with self._lock:
                batch = list(self._active)
            if batch:
                self._run_step(batch)

    def _run_step(self, batch):
        t0 = time.perf_counter()
        words = REPLY.split(" ")
        for h in batch:
            if h.cancelled or h.generated >= h.max_tokens:
                self._finish(h, "cancelled" if h.cancelled else "length")
                continue
            piece = words[h.generated % len(words)] + " "
            h.generated += 1
            h.text += piece
            h.t_first = h.t_first or time.perf_counter()
            self._emit(h, TokenEvent(h.request_id, piece, (h.generated,)))
        self._step += 1
        self._emit(None, StepEvent(
            self._step, t0, time.perf_counter(), "decode",
            decode_request_ids=tuple(h.request_id for h in batch), batch_size=len(batch),
            kv_pages_used=self.kv_pages_used,
            kv_pages_total=(self.config.num_pages or 4096) - 1))

    def _finish(self, h, reason):
        with self._lock:
            self._active.remove(h)
        now = time.perf_counter()
        first = h.t_first or now
        stats = RequestStats(8, h.generated, first - h.t_submit,
                             (h.generated - 1) / max(now - first, 1e-6))
        self._emit(h, FinishedEvent(h.request_id, reason, stats, h.text))
