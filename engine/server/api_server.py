"""The OpenAI-compatible HTTP server, run on the caller's asyncio loop.

aiohttp's AppRunner/TCPSite start a server as plain coroutines on whatever loop
is running (asyncio.run for `python -m engine serve`, the app's qasync loop),
install no signal handlers, and cancel a handler when its client disconnects
(handler_cancellation), which is how a dropped request frees its pages.
"""
from __future__ import annotations

import asyncio
import sys
import traceback

from aiohttp import web

from engine.errors import ServerStartError
from engine.server.api_error import ApiError
from engine.server.cors import Cors
from engine.server.engine_source import EngineSource
from engine.server.health import Health
from engine.server.limits import CONFIG_KEY, key_matches, limit_send_buffer
from engine.server.routes import Routes
from engine.server.server_config import ServerConfig


class ApiServer:
    """`await start()` listens and returns the base URL; `await stop()` closes it.
    The engine is the source's (the app's or the CLI's): the server never closes it."""

    def __init__(self, source: EngineSource, config: ServerConfig | None = None):
        self.config = config or ServerConfig()
        self.routes = Routes(source)
        self.health = Health(source, self.routes.active)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        host = self.config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    @property
    def num_active(self) -> int:
        return len(self.routes.active)

    async def start(self) -> str:
        if self._runner is not None:
            return self.url
        cors = Cors(self.config.cors_origins)
        app = web.Application(middlewares=[cors.middleware, self._middleware],
                              client_max_size=self.config.max_body_bytes)
        cors.install(app)
        app[CONFIG_KEY] = self.config
        self.routes.install(app)
        self.health.install(app)
        # keepalive_timeout also runs from a connection's start: a client that sends no
        # whole request (slowloris) is hung up on after it, as is an idle kept-alive one.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                               shutdown_timeout=self.config.shutdown_timeout_s,
                               keepalive_timeout=self.config.client_timeout_s)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise ServerStartError(
                f"Cannot listen on {self.config.host}:{self.config.port} ({e.strerror or e}). "
                "Pick another port, or stop the program using it.") from e
        limit_send_buffer(site, self.config.send_buffer_bytes)
        self._runner, self.port = runner, runner.addresses[0][1]
        warning = self.config.exposure_warning()
        if warning:
            print(warning, file=sys.stderr)
        return self.url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()      # open streams are cancelled: their pages come back
        self.health.close()

    @web.middleware
    async def _middleware(self, request: web.Request, handler) -> web.StreamResponse:
        self.health.follow(self.routes.source.engine)    # the engine may have changed
        try:
            self._check_key(request)
            return await handler(request)
        except ApiError as e:
            return web.json_response(e.body(), status=e.status)
        except web.HTTPException as e:  # no such route, wrong method, body too large
            return web.json_response(_http_error(request, e).body(), status=e.status)
        except asyncio.CancelledError:
            raise
        except Exception:               # a bug: log it, answer JSON, keep serving
            traceback.print_exc()
            err = ApiError(500, "Internal server error; see the server's log.")
            return web.json_response(err.body(), status=500)

    def _check_key(self, request: web.Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("Authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        token = token or request.headers.get("x-api-key", "")   # Anthropic's clients
        if not key_matches(token, key):     # constant time; the key is never echoed
            raise ApiError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>' "
                           "with the key this server was started with.",
                           code="invalid_api_key", kind="invalid_request_error")


def endpoints(app: web.Application) -> str:
    """The routes the app serves, read from its router (so the list never goes stale):
    "GET /v1/models, POST /v1/chat/completions, ... (the /v1 paths also without /v1)"."""
    seen = {(r.method, r.resource.canonical) for r in app.router.routes()
            if r.method not in ("HEAD", "OPTIONS", "*")}
    both = {(m, p) for m, p in seen if p.startswith("/v1/") and (m, p[3:]) in seen}
    shown = [(m, p) for m, p in seen if (m, "/v1" + p) not in both]
    listed = ", ".join(f"{m} {p}" for m, p in sorted(shown, key=lambda mp: (mp[1], mp[0])))
    return listed + (" (the /v1 paths also without /v1)" if both else "")


def _http_error(request: web.Request, e: web.HTTPException) -> ApiError:
    if e.status == 404:
        return ApiError(404, f"No endpoint {request.method} {request.path}; this server has "
                        f"{endpoints(request.app)}.")
    if e.status == 405:
        return ApiError(405, f"{request.method} is not allowed on {request.path}.")
    if e.status == 413:
        return ApiError(413, f"The request body is too large ({e.text}).")
    return ApiError(e.status, e.reason)
