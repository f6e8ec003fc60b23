"""The public engine: one worker thread that owns mx, requests in, events out.

    with Engine.load() as engine:              # None = the built-in default model
        for ev in engine.submit("Hello!"): ...
"""
from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from engine.arith import ceil_div
from engine.config import EngineConfig
from engine.core.engine_thread import EngineThread
from engine.core.inbox import Cancel, Close, Logits, Message, SetReadingPace, Submit
from engine.core.output_stream import OutputStream
from engine.core.sampler import RowSampler
from engine.core.sequence import Sequence
from engine.core.step_loop import Request
from engine.errors import EngineClosedError, InvalidRequestError, PromptTooLongError
from engine.events import ErrorEvent, FinishedEvent, LoadProgress, RequestStats, TokenEvent
from engine.handle import Completion, RequestHandle
from engine.loading.model_bundle import InMemoryModel, ModelBundle
from engine.sampling_params import SamplingParams

Prompt = str | list[dict] | list[int]


class Engine:
    # The engine thread's side (engine/core/engine_thread.py); a subclass may extend it.
    thread_class = EngineThread

    def __init__(self, model: str | Path | InMemoryModel | None, config: EngineConfig,
                 on_progress: Callable[[LoadProgress], None] | None = None,
                 quantize_bits: int | None = None):
        self.config = config
        self._inbox: queue.Queue = queue.Queue()
        self._listeners: list[Callable[[object], None]] = []
        # Each request's handle, until it finishes: it gets that request's events.
        self._handles: dict[int, RequestHandle] = {}
        self.num_pages = 0          # the KV pool's pages, once the model is loaded
        self.kv_page_bytes = 0      # K and V bytes one page holds (pages x this = the pool)
        self._ids = itertools.count(1)
        self._closed = False
        # Submit and close from different threads (an API server, the app's model switch):
        # a submit queued after "close" would never be read, and its caller would wait forever.
        self._close_lock = threading.Lock()
        self._loaded: Future = Future()
        worker = self.thread_class(config, self._inbox, self._emit, self._loaded,
                                   on_pool=self._set_pool, abandon=self._abandon)
        self._warmed = worker.warmed
        self._thread = threading.Thread(
            target=worker.main, args=(model, on_progress, quantize_bits),
            name="tandem-engine", daemon=True)
        self._thread.start()
        # A script that ends without close() (or whose close() ran on the engine thread)
        # still stops the engine thread before the interpreter goes down: a thread killed
        # inside mx aborts the process (issue 17 item 4). Holds no reference to self.
        self._finalizer = weakref.finalize(self, _stop_thread, self._inbox, self._thread)
        self.bundle: ModelBundle = self._loaded.result()   # re-raises a load error

    @classmethod
    def load(cls, model: str | Path | None = None, config: EngineConfig | None = None,
             on_progress: Callable[[LoadProgress], None] | None = None,
             quantize_bits: int | None = None) -> Engine:
        """Load a model folder, a .gguf file or (None) the built-in default model."""
        return cls(model, config or EngineConfig(), on_progress, quantize_bits)

    @classmethod
    def from_model(cls, model: InMemoryModel, config: EngineConfig | None = None,
                   on_progress: Callable[[LoadProgress], None] | None = None) -> Engine:
        """Serve a model already built in memory (benchmarks, tools): no file is read;
        the kernel self-test runs as for a model loaded from disk."""
        if not isinstance(model, InMemoryModel):
            raise TypeError("Engine.from_model takes an InMemoryModel "
                            "(engine.loading.model_bundle); use Engine.load for a path")
        return cls(model, config or EngineConfig(), on_progress)

    def wait_for_warm_up(self, timeout: float | None = None) -> bool:
        """Wait until the warm-up's background part (EngineConfig.warm_up_in_background)
        has run every shape; True once it has. Serving does not wait for it: a request
        meanwhile runs between its shapes (benchmarks wait, to time warm steps only)."""
        return self._warmed.wait(timeout)

    # -- properties the app shows ------------------------------------------------
    @property
    def model_name(self) -> str:
        return self.bundle.name

    @property
    def model_path(self) -> Path:
        return self.bundle.path

    @property
    def tokenizer(self):
        return self.bundle.tokenizer

    @property
    def kernel_status(self) -> dict[str, str]:
        return dict(self.bundle.kernel_status)

    @property
    def weights_status(self) -> dict[str, str]:
        """{"mode": "dense" | "quantized" | "as loaded", "reason": ...} (CPU backend)."""
        return dict(self.bundle.weights)

    @property
    def blas_status(self) -> dict[str, str]:
        """{"name", "path", "reason"}: the BLAS MLX's dense CPU matmuls use."""
        return dict(self.bundle.blas)

    # -- requests ----------------------------------------------------------------
    def submit(self, prompt: Prompt, sampling: SamplingParams | None = None, *,
               stream: bool = True) -> RequestHandle:
        """Queue a request. stream=False: the handle keeps only the final event (for
        callers that follow the request through add_listener instead)."""
        self._check_open()
        # Time to first token counts from here (the user's send), not from when the
        # engine thread picks the request up between two steps.
        t_submit = time.perf_counter()
        sampling = sampling or SamplingParams()
        ids = self.bundle.tokenizer.encode_prompt(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        self._check_ids(ids)
        if len(ids) >= self.config.max_context:
            raise PromptTooLongError(
                f"The prompt is {len(ids)} tokens; the context holds {self.config.max_context}."
                " Shorten the conversation or start a new one.")
        if ceil_div(len(ids) + 1, self.config.page_size) > self.num_pages - 1:
            raise PromptTooLongError(
                f"The prompt is {len(ids)} tokens, more than the KV budget holds; raise the "
                "KV budget in Settings or shorten the prompt.")
        handle = RequestHandle(next(self._ids), self.cancel, stream)
        self._handles[handle.request_id] = handle
        seq = Sequence(handle.request_id, ids, t_submit=t_submit)
        tok = self.bundle.tokenizer
        out = OutputStream(tok.detokenizer(skip_special_tokens=True), tok.eos_token_ids,
                           sampling, self.config.max_context)
        with self._close_lock:      # a submit queued after Close would wait forever
            self._check_open()
            self._send(Submit(Request(seq, RowSampler(sampling, ids), out)))
        return handle

    @property
    def vocab_size(self) -> int:
        """Rows of the model's embedding: the token ids it can read."""
        return self.bundle.model.args.vocab_size      # every family's ModelArgs has it

    def _check_ids(self, ids: list[int]) -> None:
        """An id outside the embedding reads past it on the device (a SIGSEGV or garbage),
        and one past int32 breaks the whole batch's step: refuse it here (item 1)."""
        vocab = self.vocab_size
        for i, t in enumerate(ids):
            if not 0 <= t < vocab:
                raise InvalidRequestError(
                    f"Token id {t} at position {i} is outside the model's vocabulary "
                    f"(0 to {vocab - 1}); send ids from this model's tokenizer.")

    def generate(self, prompts: list[Prompt], sampling: SamplingParams | None = None
                 ) -> list[Completion]:
        """Blocking; all prompts are queued together so they decode in one batch."""
        handles = [self.submit(p, sampling) for p in prompts]
        return [h.result() for h in handles]

    def cancel(self, request_id: int) -> None:
        if not self._closed:
            self._send(Cancel(request_id))

    def logits(self, token_ids: list[int]):
        """All logits of one sequence, [T, vocab] float32 (scoring and tests)."""
        self._check_open()
        fut: Future = Future()
        self._send(Logits(tuple(token_ids), fut))
        return fut.result()

    def set_reading_pace(self, min_stream_tok_s: float) -> None:
        """Change the reading-pace floor of a running engine (EngineConfig.min_stream_tok_s;
        0 turns it off): it holds from the next step on, no reload. Raises
        InvalidRequestError for a value EngineConfig would refuse."""
        self._check_open()
        try:
            config = dataclasses.replace(self.config, min_stream_tok_s=min_stream_tok_s)
        except (TypeError, ValueError) as e:
            raise InvalidRequestError(str(e)) from None
        self.config = config
        self._send(SetReadingPace(config.min_stream_tok_s))

    # -- listeners ---------------------------------------------------------------
    def add_listener(self, fn: Callable[[object], None]) -> None:
        """fn(event) is called on the engine thread for every event; keep it quick."""
        self._listeners = [*self._listeners, fn]

    def remove_listener(self, fn: Callable[[object], None]) -> None:
        # == not `is`: a bound method is a new object each time it is read.
        self._listeners = [f for f in self._listeners if f != fn]

    def _emit(self, ev) -> None:
        """The one path of every event: its request's handle, then every listener."""
        handle = (self._handles.get(ev.request_id)
                  if isinstance(ev, (TokenEvent, FinishedEvent, ErrorEvent)) else None)
        if handle is not None:
            if isinstance(ev, FinishedEvent):   # dropped before its reader wakes up
                del self._handles[ev.request_id]
            handle._put(ev)
        for fn in self._listeners:
            try:
                fn(ev)
            except Exception:   # a broken listener must not stop the engine
                traceback.print_exc()

    # -- lifecycle ---------------------------------------------------------------
    def close(self) -> None:
        """Stop the engine; running requests end as "cancelled". From the engine thread
        (a listener) it only asks: the thread ends after the listener returns."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if threading.current_thread() is self._thread:
            self._send(Close())
            return
        self._finalizer()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, message: Message) -> None:
        self._inbox.put(message)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("The engine was closed; load a model again.")

    def _set_pool(self, num_pages: int, kv_page_bytes: int) -> None:
        """The engine thread sized the KV pool (before the load's future is set)."""
        self.num_pages, self.kv_page_bytes = num_pages, kv_page_bytes

    def _abandon(self, message: str) -> None:
        """A rank of the group is lost (engine/distributed/cluster.py) and the engine
        thread is blocked in a collective for good: end every request with the error
        from the caller's (watchdog's) thread, and take no new ones."""
        self._closed = True
        for rid, handle in list(self._handles.items()):
            handle._put(ErrorEvent(rid, message))
            handle._put(FinishedEvent(rid, "error", RequestStats(0, 0, 0.0, 0.0), "", (),
                                      message))


def _stop_thread(inbox: queue.Queue, thread: threading.Thread) -> None:
    """Close the engine thread and wait for it (it clears its MLX streams on the way
    out). Called by close() or, for an engine never closed, at interpreter exit."""
    inbox.put(Close())
    if thread is not threading.current_thread():
        thread.join(timeout=30)
