"""POST /v1/messages: Anthropic's Messages API (text, streaming, tools) on the chat path;
POST /v1/messages/count_tokens: the prompt's length in tokens, rendered the same way
(the anthropic SDK's `messages.count_tokens`; agents call it to size their context).

The body becomes the OpenAI chat request it is equivalent to (anthropic_request.py), is
checked and submitted exactly as /v1/chat/completions is, and the reply is written in
Anthropic's shape (anthropic_reply.py). `model` names are not matched: agents such as
Claude Code send their own, and the loaded model answers. Errors use Anthropic's
{"type": "error", "error": {...}} body.
"""
from __future__ import annotations

from aiohttp import web

from engine.errors import InvalidRequestError, ModelLoadError
from engine.events import TokenEvent
from engine.server.anthropic_reply import AnthropicReply, error_body, event
from engine.server.anthropic_request import to_chat_body
from engine.server.api_error import ApiError
from engine.server.api_request import parse_chat
from engine.server.limits import send
from engine.server.prepare import chat_ids

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no"}


class MessagesRoute:
    def __init__(self, routes):
        self.routes = routes

    def install(self, app: web.Application) -> None:
        for prefix in ("/v1", ""):
            app.router.add_post(prefix + "/messages", self.messages)
            app.router.add_post(prefix + "/messages/count_tokens", self.count_tokens)

    async def count_tokens(self, request: web.Request) -> web.Response:
        """The body of a Messages request without max_tokens: {"input_tokens": n}."""
        try:
            body = await self.routes.read_body(request)
            if isinstance(body, dict):
                body = {**body, "max_tokens": 1, "stream": False}   # not asked for here
            req = parse_chat({**to_chat_body(body), "model": None})
            engine = self.routes.engine_for(None)
            ids = chat_ids(engine.tokenizer, req)
        except ApiError as e:
            return web.json_response(error_body(e.status, e.message), status=e.status)
        except (InvalidRequestError, ModelLoadError) as e:     # the template refused them
            return web.json_response(error_body(400, str(e)), status=400)
        return web.json_response({"input_tokens": len(ids)})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        try:
            body = to_chat_body(await self.routes.read_body(request))
            body.pop("model", None)
            req = parse_chat(body)
            engine = self.routes.engine_for(None)
            handle, prepared = self.routes.submit(engine, req)
        except ApiError as e:
            return web.json_response(error_body(e.status, e.message), status=e.status)
        tools = req.extras.tools
        reply = AnthropicReply(engine.model_name, bool(tools and tools.reads_calls),
                               req.sampling.stop, prepared.reasoning)
        self.routes.active.add(handle.request_id)
        try:
            if req.stream:
                return await _stream(request, handle, reply, engine.tokenizer)
            async for _ in handle:
                pass
            fin = handle.finished
            if fin.reason in ("error", "cancelled"):
                return web.json_response(error_body(500, engine_failed(fin)), status=500)
            return web.json_response(reply.whole(fin, _full_text(engine.tokenizer, fin)))
        finally:
            self.routes.active.discard(handle.request_id)
            if handle.finished is None:
                handle.cancel()


async def _stream(request, handle, reply: AnthropicReply, tokenizer) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    try:
        await send(request, resp, b"".join(event(n, d) for n, d in reply.start_events()))
        async for ev in handle:
            if isinstance(ev, TokenEvent) and ev.text:
                await send(request, resp, b"".join(event(n, d) for n, d in reply.delta_events(ev.text)))
        fin = handle.finished
        if fin.reason in ("error", "cancelled"):
            await send(request, resp, event("error", error_body(500, engine_failed(fin))))
        else:
            await send(request, resp, b"".join(event(n, d) for n, d in
                                      reply.end_events(fin, _full_text(tokenizer, fin))))
        await resp.write_eof()
    except ConnectionError:
        pass
    return resp


def _full_text(tokenizer, fin) -> str:
    """The reply with its stop sequence (the engine cuts it): which one matched."""
    return tokenizer.decode(fin.token_ids, skip_special_tokens=True)


def engine_failed(fin) -> str:
    why = f" ({fin.message})" if getattr(fin, "message", "") else ""
    return f"The engine stopped this request{why}; retry."
