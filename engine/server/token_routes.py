"""GET /v1/models/{id}, POST /tokenize and POST /detokenize (vLLM's and llama.cpp's
shapes both: `prompt` or `content` text, or chat `messages`; tokens back)."""
from __future__ import annotations

from aiohttp import web

from engine.errors import InvalidRequestError
from engine.server.api_error import ApiError, bad_request
from engine.server.api_request import parse_chat
from engine.server.field_reader import FieldReader
from engine.server.openai_format import model_card
from engine.server.prepare import text_ids
from engine.tokenization.chat_prompt import ChatPrompt


class TokenRoutes:
    def __init__(self, routes):
        self.routes = routes              # Routes: its engine lookup and JSON reading

    def install(self, app: web.Application) -> None:
        for prefix in ("/v1", ""):
            app.router.add_get(prefix + "/models/{model_id:.+}", self.model)
            app.router.add_post(prefix + "/tokenize", self.tokenize)
            app.router.add_post(prefix + "/detokenize", self.detokenize)

    async def model(self, request: web.Request) -> web.Response:
        engine = self.routes.engine_for(None)
        model_id = request.match_info["model_id"]
        if model_id not in (engine.model_name, str(engine.model_path)):
            raise _not_found(model_id, engine.model_name)
        return web.json_response(model_card(engine.model_name, self.routes.created))

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await self.routes.read_body(request)
        r = FieldReader(body)
        engine = self.routes.engine_for(r.string("model", None))
        tok = engine.tokenizer
        try:
            if body.get("messages") is not None:
                req = parse_chat(body)
                tools = req.extras.tools.rendered if req.extras.tools else None
                ids = tok.encode_prompt(ChatPrompt(req.prompt, tools=tools,
                                                   template_vars=req.extras.template_vars))
            else:
                text = body.get("prompt", body.get("content"))
                if not isinstance(text, str):
                    raise bad_request("Send 'prompt' (or 'content') text, or 'messages'.",
                                      "prompt")
                special = r.boolean("add_special_tokens", r.boolean("add_special", True))
                ids = text_ids(tok, text) if special else tok.encode(text)
        except InvalidRequestError as e:
            raise bad_request(str(e), "messages") from e
        out = {"tokens": ids, "count": len(ids), "max_model_len": engine.config.max_context}
        if r.boolean("with_pieces", False):
            out["tokens"] = [{"id": t, "piece": tok.decode([t])} for t in ids]
        return web.json_response(out)

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await self.routes.read_body(request)
        r = FieldReader(body)
        engine = self.routes.engine_for(r.string("model", None))
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise bad_request("'tokens' must be a list of token ids.", "tokens")
        if ids and max(ids) >= engine.tokenizer.vocab_size:
            raise bad_request(f"Token id {max(ids)} is outside the vocabulary.", "tokens")
        text = engine.tokenizer.decode(ids)
        return web.json_response({"prompt": text, "content": text})


def _not_found(model_id: str, served: str) -> ApiError:
    return ApiError(404, f"The model {model_id!r} does not exist here; this server serves "
                    f"{served!r} (see GET /v1/models).", param="model",
                    code="model_not_found", kind="invalid_request_error")
