"""The caller's side of one request: a stream of events, blocking or async."""
from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.events import ErrorEvent, FinishedEvent, TokenEvent


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    stats: object = None
    message: str = ""          # FinishedEvent.message: the error, or a note


class RequestHandle:
    """Iterate (``for ev in handle`` or ``async for ev in handle``) over TokenEvents
    until a FinishedEvent; ``cancel()`` stops the request and frees its pages.

    The engine hands it its request's events (the same objects its listeners get).
    A handle made with stream=False keeps only the FinishedEvent: ``result()`` works,
    and iterating yields that one event; callers that follow the request through
    listeners use it, so no queue fills up that nobody reads.
    Cancelling the asyncio task that iterates it (or wait_for timing out) cancels the
    request; breaking out of the loop does not (call cancel()).
    """

    def __init__(self, request_id: int, cancel: Callable[[int], None], stream: bool = True):
        self.request_id = request_id
        self._cancel = cancel
        self._stream = stream
        self._events: queue.Queue = queue.Queue()
        self.finished: FinishedEvent | None = None
        self._wake: Callable[[], None] | None = None   # set while `async for` waits

    def _put(self, event) -> None:        # engine thread
        if self._stream or isinstance(event, FinishedEvent):
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
                try:
                    await self._wait_for_event()
                except asyncio.CancelledError:
                    # The consumer was cancelled (task.cancel(), wait_for timing out): nobody
                    # reads this request any more, so stop it and free its pages.
                    self.cancel()
                    raise

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

    def result(self, timeout: float | None = None) -> Completion:
        """Block until the request finishes; TimeoutError after `timeout` seconds (the
        request goes on: cancel() it if it is no longer wanted)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.finished is None:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0)
            try:
                self._next(timeout=wait)
            except queue.Empty:
                raise TimeoutError(f"request {self.request_id} did not finish in "
                                   f"{timeout} s") from None
        f = self.finished
        return Completion(f.text, f.token_ids, f.reason, f.stats, f.message)
