"""CORS for browser front-ends (Open WebUI in a browser, a web page), off by default.

With `--cors-origin ORIGIN` (repeatable; `*` for any), a request whose Origin is allowed
gets Access-Control-Allow-Origin, and its preflight (OPTIONS with
Access-Control-Request-Method) is answered 204 before the API-key check, as browsers
send preflights without credentials. Without it no CORS header is sent and a preflight
is 405, so a web page cannot read the API (the browser's default).

Every response also carries `x-request-id`: the client's own, or a new one.
"""
from __future__ import annotations

import uuid

from aiohttp import web

_METHODS = "GET, POST, OPTIONS"
_HEADERS = "Authorization, Content-Type, X-Request-Id, OpenAI-Organization, OpenAI-Project"
_EXPOSED = "x-request-id"
_MAX_AGE = "600"


class Cors:
    def __init__(self, origins: tuple[str, ...]):
        self.origins = tuple(o.rstrip("/") for o in origins)

    def install(self, app: web.Application) -> None:
        app.on_response_prepare.append(self._on_prepare)

    def allowed(self, origin: str | None) -> str | None:
        """The Access-Control-Allow-Origin value for this Origin, or None."""
        if not origin or not self.origins:
            return None
        if "*" in self.origins:
            return "*"
        return origin if origin.rstrip("/") in self.origins else None

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        allow = self.allowed(request.headers.get("Origin"))
        if request.method == "OPTIONS" and allow is not None \
                and "Access-Control-Request-Method" in request.headers:
            asked = request.headers.get("Access-Control-Request-Headers")
            return web.Response(status=204, headers={
                "Access-Control-Allow-Methods": _METHODS,
                "Access-Control-Allow-Headers": asked or _HEADERS,
                "Access-Control-Max-Age": _MAX_AGE})
        return await handler(request)

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers.setdefault(
            "x-request-id", request.headers.get("X-Request-Id") or "req_" + uuid.uuid4().hex)
        allow = self.allowed(request.headers.get("Origin"))
        if allow is None:
            return
        response.headers["Access-Control-Allow-Origin"] = allow
        response.headers["Access-Control-Expose-Headers"] = _EXPOSED
        if allow != "*":
            response.headers["Vary"] = "Origin"
