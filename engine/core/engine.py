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
from engine.cache.kv_budget import num_pages_for
from engine.cache.model_identity import open_disk_cache, weights_mode
from engine.config import EngineConfig
from engine.core.inbox import CacheNotice, Cancel, Close, Logits, Message, SetReadingPace, Submit
from engine.core.mlx_threads import clear_thread_streams
from engine.core.output_stream import OutputStream
from engine.core.sampler import RowSampler
from engine.core.sequence import Sequence
from engine.core.step_loop import Request, StepLoop
from engine.core.warm_up import should_warm_up, warm_up
from engine.distributed.cluster import current_cluster
from engine.errors import EngineClosedError, InvalidRequestError, PromptTooLongError
from engine.events import (
    CacheNoticeEvent,
    ErrorEvent,
    FinishedEvent,
    LoadProgress,
    RequestStats,
    SubmittedEvent,
    TokenEvent,
)
from engine.handle import Completion, RequestHandle
from engine.loading.model_bundle import InMemoryModel, ModelBundle, load_bundle
from engine.sampling_params import SamplingParams

Prompt = str | list[dict] | list[int]


class Engine:
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
        self._thread = threading.Thread(
            target=self._main, args=(model, on_progress, quantize_bits),
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

    # -- the engine thread -------------------------------------------------------
    def _main(self, model, on_progress, quantize_bits) -> None:
        try:
            self._serve(model, on_progress, quantize_bits)
        finally:
            # MLX 0.32 needs each thread that used mx to clear its streams before it
            # ends, or the process aborts at exit (ml-explore/mlx#3395).
            clear_thread_streams()

    def _serve(self, model, on_progress, quantize_bits) -> None:
        # Rank 0 of several processes (engine/distributed): its shard, broadcast steps.
        cluster = current_cluster()
        try:
            bundle = (cluster.load_bundle if cluster else load_bundle)(
                model, self.config, on_progress, quantize_bits)
            spec = bundle.model.cache_spec()
            self.num_pages = num_pages_for(self.config, spec)
            self.kv_page_bytes = self.config.page_size * spec.kv_bytes_per_token()
            # Takes the pool's memory and opens the disk cache; the warm-up then writes
            # only the scratch page and slot, so nothing read from disk is touched.
            disk = self._disk_opener(model, bundle, quantize_bits)
            if cluster and disk:            # its files hold every rank's part of a turn
                disk = cluster.disk_opener(disk)
            loop = StepLoop(bundle.model, self.config, self._emit, self.num_pages,
                            disk_cache=disk,
                            make_runner=cluster.make_runner if cluster else None)
            if cluster:
                cluster.watch(lambda: loop.has_work, self._abandon)
            report = on_progress or (lambda p: None)
            if should_warm_up(self.config):
                warm_up(loop.runner, self.config, report)
            report(LoadProgress(1.0, "Ready"))
        except BaseException as e:
            self._loaded.set_exception(e)
            return
        self._loaded.set_result(bundle)
        while True:
            try:
                # A cancel reads the step in flight back: it can raise like a step.
                if not self._drain(loop, block=not loop.has_work):
                    break
                loop.step()
            except Exception as e:   # keep serving: fail only what the step involved, say why
                traceback.print_exc()
                if cluster and cluster.failed(e):     # a rank is lost: nothing can run
                    loop.fail_all(cluster.failure_message or str(e))
                    continue
                loop.step_failed(f"The engine failed while running this request: "
                                 f"{type(e).__name__}: {e}")
        loop.cancel_all()
        self._close_disk_cache(loop)
        if cluster:
            cluster.shutdown()

    def _abandon(self, message: str) -> None:
        """A rank of the group is lost (engine/distributed/cluster.py) and the engine
        thread is blocked in a collective for good: end every request with the error
        from the caller's (watchdog's) thread, and take no new ones."""
        self._closed = True
        for rid, handle in list(self._handles.items()):
            handle._put(ErrorEvent(rid, message))
            handle._put(FinishedEvent(rid, "error", RequestStats(0, 0, 0.0, 0.0), "", (),
                                      message))

    def _disk_opener(self, model, bundle: ModelBundle, quantize_bits: int | None):
        """Opens the disk cache (EngineConfig.cache_dir) for the loaded model's layout;
        None for a model built in memory (its weights are no files to identify it by)."""
        if isinstance(model, InMemoryModel):
            return None
        recurrent = bool(bundle.model.cache_spec().state_layers)
        weights = weights_mode(quantize_bits, bundle.weights.get("mode", ""))
        notify = self._send_notice
        return lambda schema: open_disk_cache(self.config, bundle.path, bundle.config,
                                              weights, schema, recurrent, notify)

    def _send_notice(self, message: str) -> None:
        self._send(CacheNotice(message))   # listeners hear it on the engine thread

    @staticmethod
    def _close_disk_cache(loop: StepLoop) -> None:
        """Write the turns kept since the last step (the replies cancel_all just ended
        included), then let the disk cache's writer finish."""
        if loop.disk is None:
            return
        try:
            loop.save_kept_turns()
        except Exception:     # closing must not fail because of the cache
            traceback.print_exc()
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
            self._emit(SubmittedEvent(seq.request_id, seq.t_submit, len(seq.prompt_ids)))
            loop.add(message.request)
        elif isinstance(message, Cancel):
            loop.cancel(message.request_id)
        elif isinstance(message, CacheNotice):
            self._emit(CacheNoticeEvent(message.message))
        elif isinstance(message, SetReadingPace):
            loop.budget.min_stream_tok_s = message.min_stream_tok_s
        elif isinstance(message, Logits):
            try:
                message.future.set_result(loop.runner.full_logits(list(message.token_ids)))
            except Exception as e:
                message.future.set_exception(e)


def _stop_thread(inbox: queue.Queue, thread: threading.Thread) -> None:
    """Close the engine thread and wait for it (it clears its MLX streams on the way
    out). Called by close() or, for an engine never closed, at interpreter exit."""
    inbox.put(Close())
    if thread is not threading.current_thread():
        thread.join(timeout=30)
