"""The caller's side of one request: a stream of events, blocking or async."""
from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable
from dataclasses import dataclass

from engine.events import ErrorEvent, FinishedEvent, TokenEvent


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    stats: object = None


class RequestHandle:
    """Iterate (``for ev in handle`` or ``async for ev in handle``) over TokenEvents
    until a FinishedEvent; ``cancel()`` stops the request and frees its pages."""

    def __init__(self, request_id: int, cancel: Callable[[int], None]):
        self.request_id = request_id
        self._cancel = cancel
        self._events: queue.Queue = queue.Queue()
        self.finished: FinishedEvent | None = None
        self._wake: Callable[[], None] | None = None   # set while `async for` waits

    def _put(self, event) -> None:        # engine thread
        self._events.put(event)
        wake = self._wake
        if wake is not None:
            wake()

    def cancel(self) -> None:
        self._cancel(self.request_id)

    def _next(self, timeout: float | None = None):
        if self.finished is not None:
            raise StopIteration
        ev = self._events.get(timeout=timeout)
        if isinstance(ev, FinishedEvent):
            self.finished = ev
        return ev

    def __iter__(self):
        return self

    def __next__(self) -> TokenEvent | FinishedEvent | ErrorEvent:
        return self._next()

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.finished is not None:
            raise StopAsyncIteration
        while True:
            try:
                return self._events_next()
            except queue.Empty:
                await self._wait_for_event()

    def _events_next(self):
        ev = self._events.get_nowait()
        if isinstance(ev, FinishedEvent):
            self.finished = ev
        return ev

    async def _wait_for_event(self) -> None:
        """Sleep until the engine thread puts an event (no polling: many streams can
        wait at once without waking the loop, or taking the GIL, between tokens)."""
        loop, arrived = asyncio.get_running_loop(), asyncio.Event()

        def wake():
            try:
                loop.call_soon_threadsafe(arrived.set)
            except RuntimeError:      # the loop closed while we waited: nobody to wake
                pass
        self._wake = wake
        try:
            if self._events.empty():  # checked after _wake is set: no event is missed
                await arrived.wait()
        finally:
            self._wake = None

    def result(self) -> Completion:
        """Block until the request finishes."""
        for _ in self:
            pass
        f = self.finished
        return Completion(f.text, f.token_ids, f.reason, f.stats)
