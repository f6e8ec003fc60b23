"""GET /health: whether a model is served, and the engine's pool as of its last step
(as llama.cpp's and vLLM's servers have one): monitoring, and tests that check a
dropped client's pages came back."""
from __future__ import annotations

from aiohttp import web

from engine.events import StepEvent
from engine.server.engine_source import EngineSource


class Health:
    """Follows whichever engine the source holds now (the app switches models)."""

    def __init__(self, source: EngineSource, active: set[int]):
        self.source = source
        self.active = active             # Routes.active: API requests in flight
        self._engine = None
        self._last: StepEvent | None = None

    def install(self, app: web.Application) -> None:
        app.router.add_get("/health", self.health)

    async def health(self, request: web.Request) -> web.Response:
        engine = self.source.engine
        if engine is None:
            status = "loading" if self.source.loading else "no_model"
            return web.json_response({"status": status}, status=503)
        self.follow(engine)
        last = self._last
        return web.json_response({
            "status": "ok", "model": engine.model_name,
            "api_requests_active": len(self.active),
            "kv_pages_total": engine.num_pages - 1,     # page 0 is scratch
            "kv_pages_used": last.kv_pages_used if last else 0,
            "kv_pages_cached": last.kv_pages_cached if last else 0,
            "requests_running": last.num_running if last else 0,
            "requests_waiting": last.num_waiting if last else 0,
            "step": last.step if last else 0,
        })

    def follow(self, engine) -> None:
        if engine is self._engine or engine is None:
            return
        if self._engine is not None:
            self._engine.remove_listener(self._on_event)
        self._engine, self._last = engine, None
        engine.add_listener(self._on_event)

    def _on_event(self, ev) -> None:      # the engine thread
        if isinstance(ev, StepEvent):
            self._last = ev

    def close(self) -> None:
        if self._engine is not None:
            self._engine.remove_listener(self._on_event)
            self._engine = None
