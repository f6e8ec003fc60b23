"""OpenAI's response objects: whole completions, stream chunks, usage, model list."""
from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field

from engine.events import RequestStats

_FINISH = {"stop": "stop", "length": "length"}


def usage(stats: RequestStats | None) -> dict:
    prompt = stats.prompt_tokens if stats else 0
    completion = stats.generated_tokens if stats else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens if stats else 0},
            "completion_tokens_details": {"reasoning_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def finish_reason(engine_reason: str) -> str:
    return _FINISH.get(engine_reason, engine_reason)


def model_card(model_id: str, created: int) -> dict:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "tandem"}


def model_list(model_ids: list[str], created: int) -> dict:
    return {"object": "list", "data": [model_card(m, created) for m in model_ids]}


def system_fingerprint(model: str) -> str:
    """Names the model loaded (OpenAI's says which backend configuration answered)."""
    return "fp_tandem_" + hashlib.sha256(model.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class ResponseShape:
    """Ids and names shared by every object of one response."""
    kind: str                  # "chat" or "text"
    model: str
    with_usage: bool = False   # stream_options.include_usage: "usage": null on chunks
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def _head(self) -> dict:
        prefix = "chatcmpl-" if self.kind == "chat" else "cmpl-"
        return {"id": prefix + self.id, "created": self.created, "model": self.model,
                "system_fingerprint": system_fingerprint(self.model)}

    def completion(self, text: str, reason: str, stats: RequestStats | None,
                   tool_calls=(), logprobs: dict | None = None) -> dict:
        """The whole reply; `reason` is already OpenAI's (finish_reason())."""
        if self.kind == "chat":
            message = {"role": "assistant", "content": text}
            if tool_calls:
                message = {"role": "assistant", "content": text or None,
                           "tool_calls": [c.openai() for c in tool_calls]}
            choice = {"index": 0, "message": message, "logprobs": logprobs,
                      "finish_reason": reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}
            obj = "text_completion"
        return {**self._head, "object": obj, "choices": [choice], "usage": usage(stats)}

    def chunk(self, text: str | None, reason: str | None = None, first: bool = False,
              logprobs: dict | None = None, delta: dict | None = None) -> dict:
        """One stream chunk: a text delta, or (reason set: OpenAI's) the choice's last."""
        if self.kind == "chat":
            if delta is None:
                delta = {"role": "assistant", "content": text or ""} if first else (
                    {"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": logprobs,
                      "finish_reason": reason}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": logprobs,
                      "finish_reason": reason}
            obj = "text_completion"
        out = {**self._head, "object": obj, "choices": [choice]}
        if self.with_usage:
            out["usage"] = None     # OpenAI sends null on every chunk but the last
        return out

    def tool_call_chunks(self, call, index: int) -> list[dict]:
        """A call as the SDKs assemble it: id, type and name first, then the arguments."""
        head = {"index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}
        args = {"index": index, "function": {"arguments": call.arguments}}
        return [self.chunk(None, delta={"tool_calls": [head]}),
                self.chunk(None, delta={"tool_calls": [args]})]

    def usage_chunk(self, stats: RequestStats | None) -> dict:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head, "object": obj, "choices": [], "usage": usage(stats)}


def sse(obj: dict | str) -> bytes:
    """One server-sent event carrying a JSON object (or the literal [DONE])."""
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode()
