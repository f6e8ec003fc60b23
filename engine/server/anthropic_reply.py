"""A reply in Anthropic's Messages shape: a whole message, or its stream of events
(message_start, content_block_start/delta/stop for text and tool_use, message_delta,
message_stop), with tool calls read from the text as for OpenAI's API, and a thinking
model's reasoning as `thinking` blocks."""
from __future__ import annotations

import json
import time
import uuid

from engine.server.reply_text import ReplyText, is_thought
from engine.tokenization.tool_calls import ToolCall


class AnthropicReply:
    def __init__(self, model: str, read_calls: bool, stops: tuple[str, ...] = (),
                 reasoning: bool | None = None):
        self.id = "msg_" + uuid.uuid4().hex[:24]
        self.model = model
        self._text = ReplyText(read_calls, reasoning)
        self._stops = stops
        self._open: str | None = None         # the kind of the block being streamed
        self._index = -1
        self.calls: list[ToolCall] = []
        self.t_start = time.time()

    # -- whole ------------------------------------------------------------------
    def whole(self, fin, full_text: str | None = None) -> dict:
        content = []
        for p in self._text.whole(fin.text):
            kind, key = ("thinking", "thinking") if is_thought(p) else ("text", "text")
            if isinstance(p, ToolCall):
                self.calls.append(p)
                content.append(_tool_use(p))
            elif content and content[-1]["type"] == kind:
                content[-1][key] += p
            else:
                content.append({"type": kind, key: str(p), **_signature(kind)})
        reason, seq = self.stop_reason(fin, full_text)
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": reason, "stop_sequence": seq,
                "usage": usage(fin.stats)}

    def stop_reason(self, fin, full_text: str | None) -> tuple[str, str | None]:
        if fin.reason == "length":
            return "max_tokens", None
        if self.calls:
            return "tool_use", None
        rest = (full_text or "")[len(fin.text):]
        for s in self._stops:
            if rest.startswith(s):
                return "stop_sequence", s
        return "end_turn", None

    # -- streamed ---------------------------------------------------------------
    def start_events(self) -> list[tuple[str, dict]]:
        message = {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 0, "output_tokens": 0}}
        return [("message_start", {"type": "message_start", "message": message}),
                ("ping", {"type": "ping"})]

    def delta_events(self, text: str) -> list[tuple[str, dict]]:
        return self._events(self._text.feed(text))

    def end_events(self, fin, full_text: str | None) -> list[tuple[str, dict]]:
        out = self._events(self._text.finish())
        out += self._close()
        reason, seq = self.stop_reason(fin, full_text)
        u = usage(fin.stats)
        return out + [("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": reason, "stop_sequence": seq},
                                         "usage": u}),
                      ("message_stop", {"type": "message_stop"})]

    def _events(self, parts: list) -> list[tuple[str, dict]]:
        out = []
        for p in parts:
            if isinstance(p, ToolCall):
                self.calls.append(p)
                out += self._close() + self._begin({**_tool_use(p), "input": {}})
                out.append(("content_block_delta", {
                    "type": "content_block_delta", "index": self._index,
                    "delta": {"type": "input_json_delta", "partial_json": p.arguments}}))
                out += self._close()
            else:
                kind = "thinking" if is_thought(p) else "text"
                if self._open != kind:
                    out += self._close() + self._begin({"type": kind, kind: "",
                                                        **_signature(kind)})
                out.append(("content_block_delta", {
                    "type": "content_block_delta", "index": self._index,
                    "delta": {"type": f"{kind}_delta", kind: str(p)}}))
        return out

    def _begin(self, block: dict) -> list[tuple[str, dict]]:
        self._index += 1
        self._open = block["type"]
        return [("content_block_start", {"type": "content_block_start", "index": self._index,
                                         "content_block": block})]

    def _close(self) -> list[tuple[str, dict]]:
        if self._open is None:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index})]


def _signature(kind: str) -> dict:
    # Anthropic signs its thinking blocks; a local model's carry an empty signature.
    return {"signature": ""} if kind == "thinking" else {}


def _tool_use(call: ToolCall) -> dict:
    try:
        args = json.loads(call.arguments)
    except ValueError:
        args = {"arguments": call.arguments}
    return {"type": "tool_use", "id": call.id.replace("call_", "toolu_", 1), "name": call.name,
            "input": args}


def usage(stats) -> dict:
    prompt = stats.prompt_tokens if stats else 0
    cached = stats.cached_tokens if stats else 0
    return {"input_tokens": prompt - cached, "output_tokens": stats.generated_tokens if stats
            else 0, "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def error_body(status: int, message: str) -> dict:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            413: "request_too_large", 503: "overloaded_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
