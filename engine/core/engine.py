"""The public engine: one worker thread that owns mx, requests in, events out.

    with Engine.load() as engine:              # None = the built-in default model
        for ev in engine.submit("Hello!"): ...
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from engine.arith import ceil_div
from engine.cache.kv_budget import num_pages_for
from engine.cache.model_identity import open_disk_cache
from engine.config import EngineConfig
from engine.core.inbox import CacheNotice, Cancel, Close, Logits, Message, Submit
from engine.core.mlx_threads import clear_thread_streams
from engine.core.output_stream import OutputStream
from engine.core.sampler import RowSampler
from engine.core.sequence import Sequence
from engine.core.step_loop import Request, StepLoop
from engine.errors import EngineClosedError, PromptTooLongError
from engine.events import (
    CacheNoticeEvent,
    ErrorEvent,
    FinishedEvent,
    LoadProgress,
    SubmittedEvent,
    TokenEvent,
)
from engine.handle import Completion, RequestHandle
from engine.loading.model_bundle import ModelBundle, load_bundle
from engine.sampling_params import SamplingParams

Prompt = str | list[dict] | list[int]


class Engine:
    def __init__(self, model: str | Path | None, config: EngineConfig,
                 on_progress: Callable[[LoadProgress], None] | None = None,
                 quantize_bits: int | None = None):
        self.config = config
        self._inbox: queue.Queue = queue.Queue()
        self._listeners: list[Callable[[object], None]] = []
        # Each request's handle, until it finishes: it gets that request's events.
        self._handles: dict[int, RequestHandle] = {}
        self.num_pages = 0          # the KV pool's pages, once the model is loaded
        self._ids = itertools.count(1)
        self._closed = False
        self._loaded: Future = Future()
        self._thread = threading.Thread(
            target=self._main, args=(model, on_progress, quantize_bits),
            name="tandem-engine", daemon=True)
        self._thread.start()
        self.bundle: ModelBundle = self._loaded.result()   # re-raises a load error

    @classmethod
    def load(cls, model: str | Path | None = None, config: EngineConfig | None = None,
             on_progress: Callable[[LoadProgress], None] | None = None,
             quantize_bits: int | None = None) -> Engine:
        """Load a model folder, a .gguf file or (None) the built-in default model."""
        return cls(model, config or EngineConfig(), on_progress, quantize_bits)

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

    # -- requests ----------------------------------------------------------------
    def submit(self, prompt: Prompt, sampling: SamplingParams | None = None, *,
               stream: bool = True) -> RequestHandle:
        """Queue a request. stream=False: the handle keeps only the final event (for
        callers that follow the request through add_listener instead)."""
        self._check_open()
        sampling = sampling or SamplingParams()
        ids = self.bundle.tokenizer.encode_prompt(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
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
        seq = Sequence(handle.request_id, ids)
        tok = self.bundle.tokenizer
        out = OutputStream(tok.detokenizer(skip_special_tokens=True), tok.eos_token_ids,
                           sampling, self.config.max_context)
        self._send(Submit(Request(seq, RowSampler(sampling, ids), out)))
        return handle

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

    # -- listeners ---------------------------------------------------------------
    def add_listener(self, fn: Callable[[object], None]) -> None:
        """fn(event) is called on the engine thread for every event; keep it quick."""
        self._listeners = [*self._listeners, fn]

    def remove_listener(self, fn: Callable[[object], None]) -> None:
        self._listeners = [f for f in self._listeners if f is not fn]

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
        if self._closed:
            return
        self._closed = True
        self._send(Close())
        self._thread.join(timeout=30)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, message: Message) -> None:
        self._inbox.put(message)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("The engine was closed; load a model again.")

    # -- the engine thread -------------------------------------------------------
    def _main(self, model, on_progress, quantize_bits) -> None:
        try:
            self._serve(model, on_progress, quantize_bits)
        finally:
            # MLX 0.32 needs each thread that used mx to clear its streams before it
            # ends, or the process aborts at exit (ml-explore/mlx#3395).
            clear_thread_streams()

    def _serve(self, model, on_progress, quantize_bits) -> None:
        try:
            bundle = load_bundle(model, self.config, on_progress, quantize_bits)
            self.num_pages = num_pages_for(self.config, bundle.model.cache_spec())
            loop = StepLoop(bundle.model, self.config, self._emit, self.num_pages,
                            disk_cache=self._disk_opener(bundle, quantize_bits))
        except BaseException as e:
            self._loaded.set_exception(e)
            return
        self._loaded.set_result(bundle)
        while True:
            if not self._drain(loop, block=not loop.has_work):
                break
            try:
                loop.step()
            except Exception as e:   # keep serving: fail what was running, say why
                traceback.print_exc()
                loop.fail_all(f"engine step failed: {e}")
        self._close_disk_cache(loop)

    def _disk_opener(self, bundle: ModelBundle, quantize_bits: int | None):
        """Opens the disk cache (EngineConfig.cache_dir) for the loaded model's layout."""
        recurrent = bool(bundle.model.cache_spec().state_layers)
        notify = self._send_notice
        return lambda schema: open_disk_cache(self.config, bundle.path, bundle.config,
                                              quantize_bits, schema, recurrent, notify)

    def _send_notice(self, message: str) -> None:
        self._send(CacheNotice(message))   # listeners hear it on the engine thread

    @staticmethod
    def _close_disk_cache(loop: StepLoop) -> None:
        """Write the turns kept since the last step, fail what still runs, then let the
        disk cache's writer finish."""
        if loop.disk is not None:
            try:
                loop.save_kept_turns()
            except Exception:     # closing must not fail because of the cache
                traceback.print_exc()
        loop.fail_all("engine closed")
        if loop.disk is not None:
            loop.disk.close()

    def _drain(self, loop: StepLoop, block: bool) -> bool:
        """Apply queued messages; False once closing."""
        while True:
            try:
                message = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if isinstance(message, Close):
                return False
            self._apply(loop, message)

    def _apply(self, loop: StepLoop, message: Message) -> None:
        if isinstance(message, Submit):
            seq = message.request.seq
            seq.t_submit = time.perf_counter()
            self._emit(SubmittedEvent(seq.request_id, seq.t_submit, len(seq.prompt_ids)))
            loop.add(message.request)
        elif isinstance(message, Cancel):
            loop.cancel(message.request_id)
        elif isinstance(message, CacheNotice):
            self._emit(CacheNoticeEvent(message.message))
        elif isinstance(message, Logits):
            try:
                message.future.set_result(loop.runner.full_logits(list(message.token_ids)))
            except Exception as e:
                message.future.set_exception(e)
