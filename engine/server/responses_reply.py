"""A reply in the Responses API's shape: a `response` object with `output` items
(a message with output_text, function_call items), or its stream of typed events
(response.created ... response.completed), in the order the SDKs' stream state reads."""
from __future__ import annotations

import json
import time
import uuid

from engine.tokenization.tool_calls import ToolCall, ToolCallStream


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class ResponsesReply:
    def __init__(self, model: str, read_calls: bool, echo: dict):
        self.id = _id("resp")
        self.model = model
        self.created = int(time.time())
        self._parser = ToolCallStream() if read_calls else None
        self._echo = echo                      # request fields the response repeats
        self.items: list[dict] = []
        self._seq = 0
        self._text_item: dict | None = None    # the message item being streamed

    def response(self, status: str, fin=None) -> dict:
        out = {"id": self.id, "object": "response", "created_at": self.created,
               "status": status, "model": self.model, "output": self.items,
               "error": None, "incomplete_details": None, "metadata": {},
               "usage": usage(fin.stats) if fin is not None else None, **self._echo}
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        return out

    # -- whole ------------------------------------------------------------------
    def whole(self, fin) -> dict:
        parts = self._parser.feed(fin.text) + self._parser.finish() if self._parser \
            else [fin.text]
        text = "".join(p for p in parts if isinstance(p, str))
        if text:
            self.items.append(_message(_id("msg"), text, "completed"))
        self.items += [_call(c, "completed") for c in parts if isinstance(c, ToolCall)]
        return self.response(_status(fin), fin)

    # -- streamed ---------------------------------------------------------------
    def start_events(self) -> list[tuple[str, dict]]:
        head = self.response("in_progress")
        return [self._ev("response.created", response=head),
                self._ev("response.in_progress", response=head)]

    def delta_events(self, text: str) -> list[tuple[str, dict]]:
        return self._events(self._parser.feed(text) if self._parser else [text])

    def end_events(self, fin) -> list[tuple[str, dict]]:
        out = self._events(self._parser.finish() if self._parser else [])
        out += self._close_text()
        status = _status(fin)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + [self._ev(kind, response=self.response(status, fin))]

    def _events(self, parts: list) -> list[tuple[str, dict]]:
        out = []
        for p in parts:
            if isinstance(p, ToolCall):
                out += self._close_text()
                index = len(self.items)
                item = _call(p, "completed")
                self.items.append(item)
                out += [self._ev("response.output_item.added", output_index=index,
                                 item={**item, "arguments": "", "status": "in_progress"}),
                        self._ev("response.function_call_arguments.delta", item_id=item["id"],
                                 output_index=index, delta=p.arguments),
                        self._ev("response.function_call_arguments.done", item_id=item["id"],
                                 output_index=index, arguments=p.arguments, name=p.name),
                        self._ev("response.output_item.done", output_index=index, item=item)]
            elif p:
                out += self._open_text()
                item = self._text_item
                item["content"][0]["text"] += p
                out.append(self._ev("response.output_text.delta", item_id=item["id"],
                                    output_index=len(self.items) - 1, content_index=0,
                                    delta=p, logprobs=[]))
        return out

    def _open_text(self) -> list[tuple[str, dict]]:
        if self._text_item is not None:
            return []
        self._text_item = _message(_id("msg"), "", "in_progress")
        self.items.append(self._text_item)
        index, item = len(self.items) - 1, self._text_item
        empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [self._ev("response.output_item.added", output_index=index,
                         item={**item, "content": []}),
                self._ev("response.content_part.added", item_id=item["id"], output_index=index,
                         content_index=0, part=empty)]

    def _close_text(self) -> list[tuple[str, dict]]:
        item, self._text_item = self._text_item, None
        if item is None:
            return []
        item["status"] = "completed"
        index = self.items.index(item)
        part = item["content"][0]
        return [self._ev("response.output_text.done", item_id=item["id"], output_index=index,
                         content_index=0, text=part["text"], logprobs=[]),
                self._ev("response.content_part.done", item_id=item["id"], output_index=index,
                         content_index=0, part=part),
                self._ev("response.output_item.done", output_index=index, item=item)]

    def _ev(self, kind: str, **fields) -> tuple[str, dict]:
        self._seq += 1
        return kind, json.loads(json.dumps({"type": kind, "sequence_number": self._seq,
                                            **fields}))


def _status(fin) -> str:
    return "incomplete" if fin.reason == "length" else "completed"


def _message(item_id: str, text: str, status: str) -> dict:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": []}]}


def _call(call: ToolCall, status: str) -> dict:
    return {"type": "function_call", "id": call.id.replace("call_", "fc_", 1),
            "call_id": call.id, "name": call.name, "arguments": call.arguments,
            "status": status}


def usage(stats) -> dict:
    prompt = stats.prompt_tokens if stats else 0
    completion = stats.generated_tokens if stats else 0
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": stats.cached_tokens if stats else 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}
