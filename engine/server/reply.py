"""One request's reply as OpenAI objects: text, tool calls read from the text, logprobs.

The engine gives text deltas and, for logprob requests, one TokenLogprob per sampled
token (SamplingParams.token_log, filled on the engine thread before the token's event
is sent, so it is there when the event arrives). Tool calls are read by
ToolCallStream, so a streamed reply and a whole one agree.
"""
from __future__ import annotations

from engine.server.openai_format import ResponseShape, finish_reason
from engine.tokenization.token_bytes import token_bytes
from engine.tokenization.tool_calls import ToolCall, ToolCallStream


class Reply:
    def __init__(self, shape: ResponseShape, tokenizer, token_log: list | None,
                 read_calls: bool, forced_call: bool = False):
        self.shape = shape
        self._tok = tokenizer
        self._log = token_log
        self._bytes = token_bytes(tokenizer) if token_log is not None else None
        self._num_logged = 0
        self._parser = ToolCallStream() if read_calls else None
        self._forced = forced_call
        self.calls: list[ToolCall] = []

    # -- streamed ---------------------------------------------------------------
    def delta_chunks(self, text: str) -> list[dict]:
        """Chunks for one text delta (may be none: text held back, or a call in progress)."""
        parts = self._parser.feed(text) if self._parser else ([text] if text else [])
        return self._chunks(parts)

    def last_chunks(self, reason: str) -> list[dict]:
        """What is left of the text, then the chunk with finish_reason."""
        out = self._chunks(self._parser.finish() if self._parser else [])
        return out + [self.shape.chunk(None, self.finish(reason), logprobs=self._logprobs())]

    def _chunks(self, parts: list) -> list[dict]:
        out = []
        for part in parts:
            if isinstance(part, ToolCall):
                index = len(self.calls)
                self.calls.append(part)
                out += self.shape.tool_call_chunks(part, index)
            elif part:
                out.append(self.shape.chunk(part, logprobs=self._logprobs()))
        return out

    # -- whole ------------------------------------------------------------------
    def whole(self, text: str, reason: str, stats) -> dict:
        content = text
        if self._parser:
            parts = self._parser.feed(text) + self._parser.finish()
            content = "".join(p for p in parts if isinstance(p, str))
            self.calls = [p for p in parts if isinstance(p, ToolCall)]
        return self.shape.completion(content, self.finish(reason), stats,
                                     tool_calls=self.calls, logprobs=self._logprobs())

    def finish(self, engine_reason: str) -> str:
        if self.calls and (engine_reason == "stop" or self._forced):
            return "tool_calls"
        return finish_reason(engine_reason)

    # -- logprobs ---------------------------------------------------------------
    def _logprobs(self) -> dict | None:
        """The logprobs of tokens sampled since the last call (OpenAI's shape)."""
        if self._log is None:
            return None
        entries = [e for e in self._log[self._num_logged:]
                   if e.token_id not in self._tok.eos_token_ids]
        self._num_logged = len(self._log)
        if self.shape.kind == "chat":
            return {"content": [self._chat_entry(e) for e in entries], "refusal": None}
        pieces = [self._piece(e.token_id) for e in entries]
        offsets = [sum(len(p) for p in pieces[:i]) for i in range(len(pieces))]
        return {"tokens": pieces, "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [{self._piece(t): lp for t, lp in e.top} for e in entries],
                "text_offset": offsets}

    def _chat_entry(self, e) -> dict:
        return {**self._token(e.token_id, e.logprob),
                "top_logprobs": [self._token(t, lp) for t, lp in e.top]}

    def _token(self, token_id: int, logprob: float) -> dict:
        piece = self._piece(token_id)
        return {"token": piece, "logprob": logprob, "bytes": list(self._bytes(token_id))}

    def _piece(self, token_id: int) -> str:
        return self._tok.decode([token_id])

