"""A reply's text in parts, in order: reasoning (Thought), answer text (str), tool calls
(ToolCall). Reasoning is split first (a call drafted while thinking is not a call),
then the answer is read for calls; each API's reply formats the parts its own way."""
from __future__ import annotations

from engine.tokenization.reasoning import ReasoningStream, Thought
from engine.tokenization.tool_calls import ToolCallStream


class ReplyText:
    def __init__(self, read_calls: bool, reasoning: bool | None):
        """reasoning: None, no split; True, the prompt left <think> open; False, split
        only if the reply opens one."""
        self._calls = ToolCallStream() if read_calls else None
        self._thoughts = ReasoningStream(reasoning) if reasoning is not None else None

    def feed(self, delta: str) -> list:
        parts = self._thoughts.feed(delta) if self._thoughts else [delta]
        return self._read_calls(parts, final=False)

    def finish(self) -> list:
        parts = self._thoughts.finish() if self._thoughts else []
        return self._read_calls(parts, final=True)

    def whole(self, text: str) -> list:
        return self.feed(text) + self.finish()

    def _read_calls(self, parts: list, final: bool) -> list:
        out = []
        for p in parts:
            if isinstance(p, Thought) or self._calls is None:
                out.append(p)
            else:
                out += self._calls.feed(p)
        if final and self._calls is not None:
            out += self._calls.finish()
        return [p for p in out if p]


def is_thought(part) -> bool:
    return isinstance(part, Thought)
