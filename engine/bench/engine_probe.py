"""An Engine that runs a function on its own thread between two steps, with the step loop:
the soak's view of the cache manager (its invariant check, the pool, the slots).

Not the product's API: it extends EngineThread._apply, the one place an inbox message is
handled, so a probe sees the loop exactly where a Submit or a Cancel would.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from engine.core.engine import Engine
from engine.core.engine_thread import EngineThread


class Probe:
    """An inbox message: fn(step_loop) on the engine thread; its result in `future`."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.future: Future = Future()


class ProbeThread(EngineThread):
    def _apply(self, loop, message) -> None:
        if not isinstance(message, Probe):
            super()._apply(loop, message)
            return
        try:
            message.future.set_result(message.fn(loop))
        except BaseException as e:     # an AssertionError from check_invariants included
            message.future.set_exception(e)


class ProbeEngine(Engine):
    thread_class = ProbeThread

    def probe(self, fn: Callable, timeout: float = 60.0):
        """fn(step_loop)'s result, computed on the engine thread between two steps."""
        p = Probe(fn)
        self._send(p)
        return p.future.result(timeout)


def pool_state(loop) -> dict:
    """The cache manager's invariants (raises AssertionError if broken) and its counts."""
    cache = loop.cache
    cache.check_invariants()
    return {"requests": len(loop.requests), "running": len(loop.scheduler.running),
            "waiting": len(loop.scheduler.waiting), "pages_total": cache.pages.num_total,
            "pages_used": cache.pages.num_used, "pages_cached": cache.num_cached_pages,
            "slots_total": cache.slots.num_slots, "slots_free": cache.slots.num_free,
            "busy": loop.has_work}


def drop_kept_turns(loop) -> dict | None:
    """With nothing left to run: drop every kept turn, then pool_state (every page and
    slot should be free). None while work (a disk save) is still due: ask again."""
    if loop.has_work:
        return None
    loop.cache.clear()
    return pool_state(loop)
