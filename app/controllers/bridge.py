"""The one object between the UI and the engine: it loads models off the GUI
thread, submits and cancels requests, and turns engine-thread callbacks into
Qt signals (emitted from the engine thread, so queued into the GUI thread)."""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading

from PySide6.QtCore import QObject, Signal, Slot

from engine.errors import TandemError
from engine.events import (
    CacheNoticeEvent,
    ErrorEvent,
    FinishedEvent,
    LoadProgress,
    StepEvent,
    SubmittedEvent,
    TokenEvent,
)


def default_check(model: str) -> None:
    """Raises ModelLoadError if `model` cannot load (no mlx: the header, not the weights)."""
    from engine.loading.model_check import check_model_path
    check_model_path(model)


def default_loader(model=None, config=None, on_progress=None):
    from engine import Engine  # imported late: loading mlx is slow
    return Engine.load(model=model, config=config, on_progress=on_progress)


class EngineBridge(QObject):
    """Signals:
        load_started(str): a load began (path, "" for the default model)
        load_progress(float, str): fraction 0..1 and a message
        model_loaded(str): the new engine's model name
        load_failed(str): the engine's message (the previous model is loaded again, or,
            when the path failed its check before anything was unloaded, kept)
        model_unloaded(): the engine was closed (a load follows)
        request_submitted(int, int): request id, prompt tokens
        token_received(int, str, int): request id, text delta, number of tokens
        request_finished(int, str, object, str, str): request id, reason ("stop",
            "length", "cancelled", "error"), RequestStats or None, the whole text
            ("" if unknown), error message
        step(object): a StepEvent
        cache_notice(str): something about the prompt cache to tell the user (e.g.
            the disk is full: it is no longer written; the engine goes on)
    """
    load_started = Signal(str)
    load_progress = Signal(float, str)
    model_loaded = Signal(str)
    load_failed = Signal(str)
    model_unloaded = Signal()
    request_submitted = Signal(int, int)
    token_received = Signal(int, str, int)
    request_finished = Signal(int, str, object, str, str)
    step = Signal(object)
    cache_notice = Signal(str)
    _engine_event = Signal(object)     # engine thread -> GUI thread
    _progress_posted = Signal(object)  # loader thread -> GUI thread

    def __init__(self, loader=default_loader, check=default_check, parent=None):
        """check(path) raises (a TandemError or OSError) if `path` cannot be loaded; it
        runs before the current model is unloaded. None: no check."""
        super().__init__(parent)
        self._loader = loader
        self._check = check
        self._loop: asyncio.AbstractEventLoop | None = None
        self.engine = None
        self.model_path: str | None = None
        self.config = None                     # the EngineConfig the engine was loaded with
        self.loading = False
        self.last_progress: tuple[float, str] = (0.0, "")   # of the load under way
        self._handles: dict[int, object] = {}
        self._engine_listeners: list = []      # e.g. the trace recorder; kept across loads
        self._engine_event.connect(self._on_engine_event)
        self._progress_posted.connect(self._on_loader_progress)

    @property
    def model_name(self) -> str:
        return self.engine.model_name if self.engine else ""

    @property
    def kernel_status(self) -> dict:
        """name -> "cuda" | "metal" | "reference (why)" for the loaded engine."""
        return dict(getattr(self.engine, "kernel_status", None) or {})

    @property
    def cpu_status(self) -> tuple[dict, dict]:
        """(BLAS, weights) of the loaded engine: which BLAS MLX's CPU matmuls use, and
        whether the weights run dense or quantized on the CPU."""
        return (dict(getattr(self.engine, "blas_status", None) or {}),
                dict(getattr(self.engine, "weights_status", None) or {}))

    # loading
    async def load_model(self, path: str | None, config=None) -> bool:
        """Check `path`, close the current engine (two big models never share memory),
        then load `path` off the GUI thread; if that fails, load the previous model
        again with its previous config. A path that fails the check (a damaged .gguf)
        unloads nothing. True if `path` is now loaded."""
        if self.loading:
            return False
        self.loading = True
        # The loop this load runs on, taken while it surely runs: a later step may be
        # resumed from Qt's event processing while qasync's loop is not running (seen
        # in tests, where a quick executor call ended as run_until_complete returned).
        self._loop = asyncio.get_running_loop()
        previous = (self.model_path, self.config) if self.engine is not None else None
        try:
            refused = await self._refused(path)
            if refused:
                self.load_failed.emit(refused)
                return False
            self.last_progress = (0.0, "")
            self.load_started.emit(path or "")
            await self._unload()
            error = await self._load(path, config)
            if error is None:
                return True
            self.load_failed.emit(error)
            if previous is not None:
                await self._reload(*previous)
            return False
        finally:
            self.loading = False

    async def _refused(self, path) -> str:
        """Why `path` cannot load, found without unloading anything ("" if it may)."""
        if self._check is None or not path:
            return ""
        try:
            await self._loop.run_in_executor(None, self._check, path)
        except (TandemError, OSError) as exc:
            return str(exc) or type(exc).__name__
        return ""

    async def _load(self, path, config) -> str | None:
        """Load and install an engine; the error message if it failed."""
        load = functools.partial(self._loader, model=path, config=config,
                                 on_progress=self._progress_posted.emit)
        try:
            engine = await self._loop.run_in_executor(None, load)
        except Exception as exc:  # noqa: BLE001 - any load failure is shown to the user
            return str(exc) or type(exc).__name__
        self.engine, self.model_path, self.config = engine, path, config
        for fn in [self._post_event, *self._engine_listeners]:
            engine.add_listener(fn)
        self.model_loaded.emit(engine.model_name)
        return None

    async def _reload(self, path, config) -> None:
        self.load_started.emit(path or "")
        error = await self._load(path, config)
        if error is not None:
            self.load_failed.emit(f"The previous model could not be loaded again: {error}")

    async def _unload(self) -> None:
        """Cancel the running requests (their messages end as stopped) and close
        the engine on a worker thread."""
        old, self.engine = self.engine, None
        if old is None:
            return
        self.load_progress.emit(0.0, "Closing the previous model…")
        for fn in [self._post_event, *self._engine_listeners]:
            old.remove_listener(fn)
        for rid in list(self._handles):
            self._handles.pop(rid).cancel()
            self.request_finished.emit(rid, "cancelled", None, "", "")
        await self._loop.run_in_executor(None, old.close)
        self.model_unloaded.emit()

    @Slot(object)
    def _on_loader_progress(self, progress: LoadProgress) -> None:
        self.last_progress = (float(progress.fraction), progress.message)
        self.load_progress.emit(float(progress.fraction), progress.message)

    def add_engine_listener(self, fn) -> None:
        """fn(event) on the engine thread, for this engine and every later one."""
        self._engine_listeners.append(fn)
        if self.engine is not None:
            self.engine.add_listener(fn)

    # requests
    def submit(self, prompt, params) -> int:
        """Returns the request id; raises TandemError (e.g. prompt too long)."""
        self._require_engine()
        # The bridge follows requests through its listener: the handle keeps only the end.
        handle = self.engine.submit(prompt, params, stream=False)
        self._handles[handle.request_id] = handle
        return handle.request_id

    def _require_engine(self) -> None:
        if self.engine is None:
            from engine.errors import EngineClosedError
            if self.loading:
                raise EngineClosedError("The model is loading; send again when it is ready.")
            raise EngineClosedError("No model is loaded: open one from the Model menu.")

    def submit_continuation(self, prompt: list[dict], answer: str, params) -> int:
        """Like submit, for an answer cut short: the prompt as the model's chat template
        renders it for a reply, then `answer` as the start of that reply, so the model
        goes on from its last word instead of starting again."""
        if self.engine is None:
            return self.submit(prompt, params)      # raises, saying why
        tokenizer = self.engine.tokenizer
        return self.submit(tokenizer.encode_prompt(prompt) + tokenizer.encode(answer), params)

    def with_json_schema(self, params, schema: dict | None, answer: str = ""):
        """`params` constrained to replies that follow `schema` (None: as they are), by the
        loaded model's grammar over its vocabulary: the same llguidance per-row token mask
        the API's response_format uses (engine/server/grammar.py). `answer`: a reply cut
        short that the model continues (its tokens are fed to the grammar first).
        Raises ValueError if the schema cannot be built, EngineClosedError with no model."""
        if schema is None:
            return params
        self._require_engine()
        from engine.server import grammar  # late: llguidance loads on first use
        tokenizer = self.engine.tokenizer
        constraint = grammar.build_grammar(tokenizer, self.engine.vocab_size,
                                           grammar.json_schema_grammar(schema))
        for token in tokenizer.encode(answer) if answer else ():
            constraint.accept(token)
        return dataclasses.replace(params, constraint=constraint)

    def warm_json_schema(self) -> None:
        """Build the loaded model's grammar vocabulary on a worker thread (it is cached),
        so a conversation's first schema-constrained send does not freeze the window."""
        if self.engine is None:
            return
        from engine.server import grammar
        if grammar.available():
            threading.Thread(target=grammar.warm, daemon=True, name="grammar-warm",
                             args=(self.engine.tokenizer, self.engine.vocab_size)).start()

    def cancel(self, request_id: int) -> None:
        handle = self._handles.get(request_id)
        if handle is not None:
            handle.cancel()

    def set_reading_pace(self, min_stream_tok_s: float) -> bool:
        """The loaded engine's reading-pace floor, changed live (no reload); a reload
        after a failed load keeps it. False if no engine runs or it already has it."""
        if self.engine is None or self.config is None or (
                self.config.min_stream_tok_s == min_stream_tok_s):
            return False
        self.engine.set_reading_pace(min_stream_tok_s)
        self.config = dataclasses.replace(self.config, min_stream_tok_s=min_stream_tok_s)
        return True

    def is_active(self, request_id: int) -> bool:
        return request_id in self._handles

    def close(self) -> None:
        if self.engine is not None:
            self.engine.remove_listener(self._post_event)
            for handle in self._handles.values():
                handle.cancel()
            self._handles.clear()
            self.engine.close()
            self.engine = None

    # engine thread
    def _post_event(self, event) -> None:
        """Called on the engine thread: only hand the event over."""
        self._engine_event.emit(event)

    @Slot(object)
    def _on_engine_event(self, event) -> None:
        if isinstance(event, TokenEvent):
            if event.request_id in self._handles:
                self.token_received.emit(event.request_id, event.text, len(event.token_ids))
        elif isinstance(event, FinishedEvent):
            # message: the error's reason, or why a reply was cut (a full KV cache).
            if self._handles.pop(event.request_id, None) is not None:
                self.request_finished.emit(event.request_id, event.reason, event.stats,
                                           event.text, event.message)
        elif isinstance(event, ErrorEvent):
            pass    # its FinishedEvent follows with the text so far and the same message
        elif isinstance(event, StepEvent):
            self.step.emit(event)
        elif isinstance(event, SubmittedEvent):
            self.request_submitted.emit(event.request_id, event.prompt_tokens)
        elif isinstance(event, CacheNoticeEvent):
            self.cache_notice.emit(event.message)
