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
from engine.server.limits import check_context, prompt_ids, read_json, send, too_long
from engine.server.openai_format import ResponseShape, model_list, sse
from engine.tokenization.messages import check_text

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no"}


class Routes:
    """Handlers over whatever engine `source` holds now; `active` holds the engine
    request ids of the API requests in flight (the app shows their count)."""

    def __init__(self, source: EngineSource):
        self.source = source
        self.active: set[int] = set()
        self._created = int(time.time())

    def install(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)

    async def models(self, request: web.Request) -> web.Response:
        engine = self._engine(None)
        return web.json_response(model_list([engine.model_name], self._created))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, parse_chat(await read_json(request)))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, parse_completion(await read_json(request)))

    # -- one request ----------------------------------------------------------
    async def _complete(self, request: web.Request, req: ApiRequest) -> web.StreamResponse:
        engine = self._engine(req.model)
        handle = _submit(engine, req)
        shape = ResponseShape(req.kind, engine.model_name)
        self.active.add(handle.request_id)
        try:
            if req.stream:
                return await _stream(request, handle, shape, req.include_usage)
            return await _whole(handle, shape)
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
                           param="model", code="model_not_found")
        return engine


def _submit(engine, req: ApiRequest):
    try:
        prompt = (_text_ids(engine.tokenizer, req.prompt) if req.kind == "text"
                  else prompt_ids(engine, req.prompt))
        check_context(len(prompt), req.sampling.max_tokens if req.max_tokens_given else None,
                      engine.config.max_context, req.kind)
        return engine.submit(prompt, req.sampling_for(engine.config.max_context))
    except PromptTooLongError as e:
        raise too_long(e, req.kind) from e
    except InvalidRequestError as e:
        raise bad_request(str(e), "messages" if req.kind == "chat" else "prompt") from e
    except ModelLoadError as e:        # the chat template refused the messages
        raise bad_request(str(e), "messages") from e
    except EngineClosedError as e:
        raise ApiError(503, str(e), code="model_not_loaded") from e
    except ValueError as e:
        raise bad_request(str(e)) from e


def _text_ids(tokenizer, prompt: str | list[int]) -> list[int]:
    """A completion prompt is raw text: no chat template, BOS as the tokenizer adds it."""
    if isinstance(prompt, list):
        if max(prompt) >= tokenizer.vocab_size:
            raise bad_request(f"Token id {max(prompt)} is outside the vocabulary "
                              f"(size {tokenizer.vocab_size}).", "prompt")
        return prompt
    ids = tokenizer.encode(check_text(prompt, "The prompt"))
    bos = tokenizer.bos_token_id
    if tokenizer.add_bos_token and (not ids or ids[0] != bos):
        ids = [bos, *ids]
    return ids


async def _whole(handle, shape: ResponseShape) -> web.Response:
    async for _ in handle:
        pass
    fin = handle.finished
    if fin.reason in _STOPPED_BY_ENGINE:
        raise _engine_failed(fin)
    return web.json_response(shape.completion(fin.text, fin.reason, fin.stats))


async def _stream(request: web.Request, handle, shape: ResponseShape,
                  include_usage: bool) -> web.StreamResponse:
    resp = web.StreamResponse(headers=_SSE_HEADERS)
    await resp.prepare(request)
    try:
        if shape.kind == "chat":
            await send(request, resp, sse(shape.chunk("", first=True,
                                                      with_usage=include_usage)))
        async for ev in handle:
            if isinstance(ev, TokenEvent) and ev.text:
                await send(request, resp, sse(shape.chunk(ev.text, with_usage=include_usage)))
        await send(request, resp, _last_chunks(handle.finished, shape, include_usage))
        await resp.write_eof()
    except ConnectionError:            # the client went away mid-stream
        pass
    return resp


def _last_chunks(fin, shape: ResponseShape, include_usage: bool) -> bytes:
    if fin.reason in _STOPPED_BY_ENGINE:
        return sse(_engine_failed(fin).body()) + sse("[DONE]")
    out = sse(shape.chunk(None, fin.reason, with_usage=include_usage))
    if include_usage:
        out += sse(shape.usage_chunk(fin.stats))
    return out + sse("[DONE]")


# The server cancels a request only when its client has gone, and then nobody reads the
# end: a "cancelled" finish a client sees was the engine's doing (closed, model switched).
_STOPPED_BY_ENGINE = ("error", "cancelled")


def _engine_failed(fin) -> ApiError:
    why = f" ({fin.message})" if getattr(fin, "message", "") else ""
    return ApiError(500, f"The engine stopped this request{why}: a step failed, or the model "
                    "was closed or switched; retry.", code="engine_error")
