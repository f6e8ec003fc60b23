"""POST /v1/responses: OpenAI's Responses API (text, function calls, text.format) on the
chat path: the body becomes the equivalent chat request (responses_request.py), is
checked and submitted as /v1/chat/completions is, and is answered in the Responses
shape (responses_reply.py). Nothing is stored: each request carries its conversation."""
from __future__ import annotations

from aiohttp import web

from engine.events import TokenEvent
from engine.server.anthropic_reply import event
from engine.server.api_error import ApiError
from engine.server.api_request import parse_chat
from engine.server.limits import send
from engine.server.messages_route import SSE_HEADERS, engine_failed
from engine.server.responses_reply import ResponsesReply
from engine.server.responses_request import to_chat_body


class ResponsesRoute:
    def __init__(self, routes):
        self.routes = routes

    def install(self, app: web.Application) -> None:
        for prefix in ("/v1", ""):
            app.router.add_post(prefix + "/responses", self.responses)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = to_chat_body(await self.routes.read_body(request))
        req = parse_chat(body)
        engine = self.routes.engine_for(req.model)
        handle, _ = self.routes.submit(engine, req)
        tools = req.extras.tools
        echo = {"instructions": body["messages"][0]["content"]
                if body["messages"][0]["role"] == "system" else None,
                "temperature": req.sampling.temperature, "top_p": req.sampling.top_p,
                "max_output_tokens": req.sampling.max_tokens if req.max_tokens_given else None,
                "parallel_tool_calls": tools.parallel if tools else True,
                "tool_choice": tools.choice if tools and tools.choice != "function"
                else ({"type": "function", "name": tools.name} if tools else "auto"),
                "tools": [{"type": "function", **t["function"]} for t in tools.tools]
                if tools else [], "text": {"format": {"type": "text"}}, "store": False}
        reply = ResponsesReply(engine.model_name, bool(tools and tools.reads_calls), echo)
        self.routes.active.add(handle.request_id)
        try:
            if req.stream:
                return await _stream(request, handle, reply)
            async for _ in handle:
                pass
            fin = handle.finished
            if fin.reason in ("error", "cancelled"):
                raise ApiError(500, engine_failed(fin), code="engine_error")
            return web.json_response(reply.whole(fin))
        finally:
            self.routes.active.discard(handle.request_id)
            if handle.finished is None:
                handle.cancel()


async def _stream(request, handle, reply: ResponsesReply) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    try:
        await send(request, resp, b"".join(event(n, d) for n, d in reply.start_events()))
        async for ev in handle:
            if isinstance(ev, TokenEvent) and ev.text:
                await send(request, resp, b"".join(event(n, d) for n, d in reply.delta_events(ev.text)))
        fin = handle.finished
        if fin.reason in ("error", "cancelled"):
            await send(request, resp, event("error", {"type": "error", "code": "engine_error",
                                             "message": engine_failed(fin), "param": None,
                                             "sequence_number": 0}))
        else:
            await send(request, resp, b"".join(event(n, d) for n, d in reply.end_events(fin)))
        await resp.write_eof()
    except ConnectionError:
        pass
    return resp
