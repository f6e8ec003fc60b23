"""The one object between the UI and the engine: it loads models off the GUI
thread, submits and cancels requests, and turns engine-thread callbacks into
Qt signals (emitted from the engine thread, so queued into the GUI thread)."""
from __future__ import annotations

import asyncio
import functools

from PySide6.QtCore import QObject, Signal, Slot

from engine.events import (
    ErrorEvent,
    FinishedEvent,
    LoadProgress,
    StepEvent,
    SubmittedEvent,
    TokenEvent,
)


def default_loader(model=None, config=None, on_progress=None):
    from engine import Engine  # imported late: loading mlx is slow
    return Engine.load(model=model, config=config, on_progress=on_progress)


class EngineBridge(QObject):
    """Signals:
        load_started(str): a load began (path, "" for the default model)
        load_progress(float, str): fraction 0..1 and a message
        model_loaded(str): the new engine's model name
        load_failed(str): the engine's message; the previous model keeps serving
        request_submitted(int, int): request id, prompt tokens
        token_received(int, str, int): request id, text delta, number of tokens
        request_finished(int, str, object, str, str): request id, reason ("stop",
            "length", "cancelled", "error"), RequestStats or None, the whole text
            ("" if unknown), error message
        step(object): a StepEvent
    """
    load_started = Signal(str)
    load_progress = Signal(float, str)
    model_loaded = Signal(str)
    load_failed = Signal(str)
    request_submitted = Signal(int, int)
    token_received = Signal(int, str, int)
    request_finished = Signal(int, str, object, str, str)
    step = Signal(object)
    _engine_event = Signal(object)     # engine thread -> GUI thread
    _progress_posted = Signal(object)  # loader thread -> GUI thread

    def __init__(self, loader=default_loader, parent=None):
        super().__init__(parent)
        self._loader = loader
        self.engine = None
        self.model_path: str | None = None
        self.loading = False
        self._handles: dict[int, object] = {}
        self._engine_listeners: list = []      # e.g. the trace recorder; kept across loads
        self._engine_event.connect(self._on_engine_event)
        self._progress_posted.connect(self._on_loader_progress)

    @property
    def model_name(self) -> str:
        return self.engine.model_name if self.engine else ""

    # loading
    async def load_model(self, path: str | None, config=None) -> bool:
        """Load off the GUI thread; on failure keep the current engine."""
        self.loading = True
        self.load_started.emit(path or "")
        load = functools.partial(self._loader, model=path, config=config,
                                 on_progress=self._progress_posted.emit)
        try:
            engine = await asyncio.get_running_loop().run_in_executor(None, load)
        except Exception as exc:  # noqa: BLE001 - any load failure leaves the old model serving
            self.loading = False
            self.load_failed.emit(str(exc) or type(exc).__name__)
            return False
        self.loading = False
        await self._swap(engine)
        self.model_path = path
        self.model_loaded.emit(engine.model_name)
        return True

    async def _swap(self, engine) -> None:
        old, self.engine = self.engine, engine
        for fn in [self._post_event, *self._engine_listeners]:
            engine.add_listener(fn)
        if old is None:
            return
        for fn in [self._post_event, *self._engine_listeners]:
            old.remove_listener(fn)
        for rid in list(self._handles):     # requests of the old engine end here
            self._handles.pop(rid).cancel()
            self.request_finished.emit(rid, "cancelled", None, "", "")
        await asyncio.get_running_loop().run_in_executor(None, old.close)

    @Slot(object)
    def _on_loader_progress(self, progress: LoadProgress) -> None:
        self.load_progress.emit(float(progress.fraction), progress.message)

    def add_engine_listener(self, fn) -> None:
        """fn(event) on the engine thread, for this engine and every later one."""
        self._engine_listeners.append(fn)
        if self.engine is not None:
            self.engine.add_listener(fn)

    # requests
    def submit(self, prompt, params) -> int:
        """Returns the request id; raises TandemError (e.g. prompt too long)."""
        if self.engine is None:
            from engine.errors import EngineClosedError
            raise EngineClosedError("No model is loaded: open one from the Model menu.")
        handle = self.engine.submit(prompt, params)
        self._handles[handle.request_id] = handle
        return handle.request_id

    def cancel(self, request_id: int) -> None:
        handle = self._handles.get(request_id)
        if handle is not None:
            handle.cancel()

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
            if self._handles.pop(event.request_id, None) is not None:
                self.request_finished.emit(event.request_id, event.reason, event.stats,
                                           event.text, "")
        elif isinstance(event, ErrorEvent):
            if self._handles.pop(event.request_id, None) is not None:
                self.request_finished.emit(event.request_id, "error", None, "", event.message)
        elif isinstance(event, StepEvent):
            self.step.emit(event)
        elif isinstance(event, SubmittedEvent):
            self.request_submitted.emit(event.request_id, event.prompt_tokens)
