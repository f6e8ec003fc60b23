"""A reply in Anthropic's Messages shape: a whole message, or its stream of events
(message_start, content_block_start/delta/stop for text and tool_use, message_delta,
message_stop), with tool calls read from the text as for OpenAI's API."""
from __future__ import annotations

import json
import time
import uuid

from engine.tokenization.tool_calls import ToolCall, ToolCallStream


class AnthropicReply:
    def __init__(self, model: str, read_calls: bool, stops: tuple[str, ...] = ()):
        self.id = "msg_" + uuid.uuid4().hex[:24]
        self.model = model
        self._parser = ToolCallStream() if read_calls else None
        self._stops = stops
        self._open: str | None = None         # the kind of the block being streamed
        self._index = -1
        self.calls: list[ToolCall] = []
        self.t_start = time.time()

    # -- whole ------------------------------------------------------------------
    def whole(self, fin, full_text: str | None = None) -> dict:
        parts = self._parser.feed(fin.text) + self._parser.finish() if self._parser \
            else [fin.text]
        content = []
        for p in parts:
            if isinstance(p, ToolCall):
                self.calls.append(p)
                content.append(_tool_use(p))
            elif p and content and content[-1]["type"] == "text":
                content[-1]["text"] += p
            elif p:
                content.append({"type": "text", "text": p})
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
        parts = self._parser.feed(text) if self._parser else [text]
        return self._events(parts)

    def end_events(self, fin, full_text: str | None) -> list[tuple[str, dict]]:
        out = self._events(self._parser.finish() if self._parser else [])
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
            elif p:
                if self._open != "text":
                    out += self._close() + self._begin({"type": "text", "text": ""})
                out.append(("content_block_delta", {
                    "type": "content_block_delta", "index": self._index,
                    "delta": {"type": "text_delta", "text": p}}))
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
