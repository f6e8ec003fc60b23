"""OpenAI's response objects: whole completions, stream chunks, usage, model list."""
from __future__ import annotations

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
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens if stats else 0}}


def finish_reason(engine_reason: str) -> str:
    return _FINISH.get(engine_reason, engine_reason)


def model_list(model_ids: list[str], created: int) -> dict:
    return {"object": "list",
            "data": [{"id": m, "object": "model", "created": created, "owned_by": "tandem"}
                     for m in model_ids]}


@dataclass(frozen=True)
class ResponseShape:
    """Ids and names shared by every object of one response."""
    kind: str                  # "chat" or "text"
    model: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def _head(self) -> dict:
        prefix = "chatcmpl-" if self.kind == "chat" else "cmpl-"
        return {"id": prefix + self.id, "created": self.created, "model": self.model}

    def completion(self, text: str, reason: str, stats: RequestStats | None) -> dict:
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": finish_reason(reason)}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": finish_reason(reason)}
            obj = "text_completion"
        return {**self._head, "object": obj, "choices": [choice], "usage": usage(stats)}

    def chunk(self, text: str | None, reason: str | None = None, first: bool = False,
              with_usage: bool = False) -> dict:
        """One stream chunk: a text delta, or (reason set) the choice's last chunk."""
        if self.kind == "chat":
            delta = {"role": "assistant", "content": text or ""} if first else (
                {"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": None,
                      "finish_reason": finish_reason(reason) if reason else None}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None,
                      "finish_reason": finish_reason(reason) if reason else None}
            obj = "text_completion"
        out = {**self._head, "object": obj, "choices": [choice]}
        if with_usage:
            out["usage"] = None     # OpenAI sends null on every chunk but the last
        return out

    def usage_chunk(self, stats: RequestStats | None) -> dict:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head, "object": obj, "choices": [], "usage": usage(stats)}


def sse(obj: dict | str) -> bytes:
    """One server-sent event carrying a JSON object (or the literal [DONE])."""
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode()
