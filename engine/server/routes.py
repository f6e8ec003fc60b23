"""The endpoints: /v1/models, /v1/chat/completions, /v1/completions (aiohttp handlers)."""
from __future__ import annotations

import time

from aiohttp import web

from engine.errors import (
    EngineClosedError,
    InvalidRequestError,
    ModelLoadError,
    PromptTooLongError,
)
from engine.events import TokenEvent
from engine.server.api_error import ApiError, bad_request
from engine.server.api_request import ApiRequest, parse_chat, parse_completion
from engine.server.engine_source import EngineSource
from engine.server.limits import read_json, send, too_long
from engine.server.messages_route import MessagesRoute
from engine.server.openai_format import ResponseShape, model_list, sse
from engine.server.prepare import prepare
from engine.server.reply import Reply
from engine.server.responses_route import ResponsesRoute
from engine.server.token_routes import TokenRoutes

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no"}


class Routes:
    """Handlers over whatever engine `source` holds now; `active` holds the engine
    request ids of the API requests in flight (the app shows their count)."""

    def __init__(self, source: EngineSource):
        self.source = source
        self.active: set[int] = set()
        self.created = int(time.time())

    def install(self, app: web.Application) -> None:
        for prefix in ("/v1", ""):         # llama.cpp serves the paths without /v1 too
            app.router.add_get(prefix + "/models", self.models)
            app.router.add_post(prefix + "/chat/completions", self.chat)
            app.router.add_post(prefix + "/completions", self.completions)
        TokenRoutes(self).install(app)
        MessagesRoute(self).install(app)
        ResponsesRoute(self).install(app)

    def engine_for(self, model: str | None):
        return self._engine(model)

    def submit(self, engine, req: ApiRequest):
        """(handle, SamplingParams) of a checked request, queued in the engine."""
        return _submit(engine, req)

    async def read_body(self, request: web.Request) -> object:
        return await read_json(request)

    async def models(self, request: web.Request) -> web.Response:
        engine = self._engine(None)
        return web.json_response(model_list([engine.model_name], self.created))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, parse_chat(await read_json(request)))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, parse_completion(await read_json(request)))

    # -- one request ----------------------------------------------------------
    async def _complete(self, request: web.Request, req: ApiRequest) -> web.StreamResponse:
        engine = self._engine(req.model)
        handle, sampling = _submit(engine, req)
        shape = ResponseShape(req.kind, engine.model_name, req.stream and req.include_usage)
        tools = req.extras.tools
        reply = Reply(shape, engine.tokenizer, sampling.token_log,
                      read_calls=bool(tools and tools.reads_calls),
                      forced_call=bool(tools and tools.forced))
        self.active.add(handle.request_id)
        try:
            if req.stream:
                return await _stream(request, handle, reply, req.include_usage)
            return await _whole(handle, reply)
        finally:
            self.active.discard(handle.request_id)
            if handle.finished is None:
                handle.cancel()    # the client went away: stop decoding, free its pages

    def _engine(self, model: str | None):
        engine = self.source.engine
        if engine is None:
            if self.source.loading:
                raise ApiError(503, "The model is loading; retry in a few seconds.",
                               code="model_loading")
            raise ApiError(503, "No model is loaded; load one in Tandem first.",
                           code="model_not_loaded")
        if model is not None and model not in (engine.model_name, str(engine.model_path)):
            raise ApiError(404, f"The model {model!r} is not loaded here; this server serves "
                           f"{engine.model_name!r} (see GET /v1/models).",
                           param="model", code="model_not_found", kind="invalid_request_error")
        return engine


def _submit(engine, req: ApiRequest):
    """(the engine's handle, the SamplingParams it runs with)."""
    prompt_param = "messages" if req.kind == "chat" else "prompt"
    try:
        ids, sampling = prepare(engine, req)
        return engine.submit(ids, sampling), sampling
    except PromptTooLongError as e:
        raise too_long(e, req.kind) from e
    except (ModelLoadError, InvalidRequestError) as e:   # e.g. the template refused them
        raise bad_request(str(e), prompt_param) from e
    except EngineClosedError as e:
        raise ApiError(503, str(e), code="model_not_loaded") from e
    except ValueError as e:
        raise bad_request(str(e)) from e


async def _whole(handle, reply: Reply) -> web.Response:
    async for _ in handle:
        pass
    fin = handle.finished
    if fin.reason in _STOPPED_BY_ENGINE:
        raise _engine_failed(fin)
    return web.json_response(reply.whole(fin.text, fin.reason, fin.stats))


async def _stream(request: web.Request, handle, reply: Reply,
                  include_usage: bool) -> web.StreamResponse:
    resp = web.StreamResponse(headers=_SSE_HEADERS)
    await resp.prepare(request)
    try:
        if reply.shape.kind == "chat":
            await send(request, resp, sse(reply.shape.chunk("", first=True)))
        async for ev in handle:
            if isinstance(ev, TokenEvent) and ev.text:
                await send(request, resp, b"".join(sse(c) for c in reply.delta_chunks(ev.text)))
        await send(request, resp, _last_chunks(handle.finished, reply, include_usage))
        await resp.write_eof()
    except ConnectionError:            # the client went away mid-stream
        pass
    return resp


def _last_chunks(fin, reply: Reply, include_usage: bool) -> bytes:
    if fin.reason in _STOPPED_BY_ENGINE:
        return sse(_engine_failed(fin).body()) + sse("[DONE]")
    out = b"".join(sse(c) for c in reply.last_chunks(fin.reason))
    if include_usage:
        out += sse(reply.shape.usage_chunk(fin.stats))
    return out + sse("[DONE]")


# The server cancels a request only when its client has gone, and then nobody reads the
# end: a "cancelled" finish a client sees was the engine's doing (closed, model switched).
_STOPPED_BY_ENGINE = ("error", "cancelled")


def _engine_failed(fin) -> ApiError:
    why = f" ({fin.message})" if getattr(fin, "message", "") else ""
    return ApiError(500, f"The engine stopped this request{why}: a step failed, or the model "
                    "was closed or switched; retry.", code="engine_error")
