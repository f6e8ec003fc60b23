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

from engine.config import EngineConfig
from engine.core.mlx_threads import clear_thread_streams
from engine.core.output_stream import OutputStream
from engine.core.sampler import RowSampler
from engine.core.sequence import Sequence
from engine.core.step_loop import Request, StepLoop
from engine.errors import EngineClosedError, PromptTooLongError
from engine.events import LoadProgress, SubmittedEvent
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

    @property
    def weights_status(self) -> dict[str, str]:
        """{"mode": "dense" | "quantized" | "as loaded", "reason": ...} (CPU backend)."""
        return dict(self.bundle.weights)

    @property
    def blas_status(self) -> dict[str, str]:
        """{"name", "path", "reason"}: the BLAS MLX's dense CPU matmuls use."""
        return dict(self.bundle.blas)

    # -- requests ----------------------------------------------------------------
    def submit(self, prompt: Prompt, sampling: SamplingParams | None = None) -> RequestHandle:
        self._check_open()
        sampling = sampling or SamplingParams()
        ids = self.bundle.tokenizer.encode_prompt(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) >= self.config.max_context:
            raise PromptTooLongError(
                f"The prompt is {len(ids)} tokens; the context holds {self.config.max_context}."
                " Shorten the conversation or start a new one.")
        if -(-(len(ids) + 1) // self.config.page_size) > self.config.num_usable_pages:
            raise PromptTooLongError(
                f"The prompt is {len(ids)} tokens, more than the KV budget holds; raise the "
                "KV budget in Settings or shorten the prompt.")
        handle = RequestHandle(next(self._ids), self.cancel)
        seq = Sequence(handle.request_id, ids, sampling)
        tok = self.bundle.tokenizer
        stream = OutputStream(tok.detokenizer(skip_special_tokens=True), tok.eos_token_ids,
                              sampling, self.config.max_context)

        def deliver(ev, _put=handle._put):
            _put(ev)
            self._emit(ev)
        self._inbox.put(("submit", Request(seq, RowSampler(sampling, ids), stream, deliver)))
        return handle

    def generate(self, prompts: list[Prompt], sampling: SamplingParams | None = None
                 ) -> list[Completion]:
        """Blocking; all prompts are queued together so they decode in one batch."""
        handles = [self.submit(p, sampling) for p in prompts]
        return [h.result() for h in handles]

    def cancel(self, request_id: int) -> None:
        if not self._closed:
            self._inbox.put(("cancel", request_id))

    def logits(self, token_ids: list[int]):
        """All logits of one sequence, [T, vocab] float32 (scoring and tests)."""
        self._check_open()
        fut: Future = Future()
        self._inbox.put(("logits", (list(token_ids), fut)))
        return fut.result()

    # -- listeners ---------------------------------------------------------------
    def add_listener(self, fn: Callable[[object], None]) -> None:
        """fn(event) is called on the engine thread for every event; keep it quick."""
        self._listeners = [*self._listeners, fn]

    def remove_listener(self, fn: Callable[[object], None]) -> None:
        self._listeners = [f for f in self._listeners if f is not fn]

    def _emit(self, ev) -> None:
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
        self._inbox.put(("close", None))
        self._thread.join(timeout=30)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
            loop = StepLoop(bundle.model, self.config, self._emit)
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
        loop.fail_all("engine closed")

    def _drain(self, loop: StepLoop, block: bool) -> bool:
        """Apply queued commands; False once closing."""
        while True:
            try:
                cmd, arg = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if cmd == "close":
                return False
            if cmd == "submit":
                arg.seq.t_submit = time.perf_counter()
                self._emit(SubmittedEvent(arg.seq.request_id, arg.seq.t_submit,
                                          len(arg.seq.prompt_ids)))
                loop.add(arg)
            elif cmd == "cancel":
                loop.cancel(arg)
            elif cmd == "logits":
                ids, fut = arg
                try:
                    fut.set_result(loop.runner.full_logits(ids))
                except Exception as e:
                    fut.set_exception(e)
