"""A thinking model's reasoning, split from its answer: `<think>...</think>`, whole or
streamed. The reply starts inside the reasoning when the prompt leaves `<think>` open
(Qwen3.5's template by default), or enters it when it begins with `<think>`.
"""
from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


class Thought(str):
    """A piece of reasoning (a str, so it can flow where text does)."""


class ReasoningStream:
    """Feed text deltas; get back Thought pieces and plain text (the answer), in order.
    Text that may be the start of a marker is held until it is known not to be."""

    def __init__(self, starts_inside: bool):
        self._inside = starts_inside
        self._at_start = True            # nothing of the answer seen yet
        self._buf = ""

    def feed(self, delta: str) -> list[str]:
        self._buf += delta
        out: list[str] = []
        while self._buf:
            if self._inside:
                end = self._buf.find(CLOSE)
                if end < 0:
                    keep = _partial_suffix(self._buf, CLOSE)
                    out += _thought(self._buf[:len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep:]
                    return out
                out += _thought(self._buf[:end])
                self._buf, self._inside = self._buf[end + len(CLOSE):].lstrip("\n"), False
                self._at_start = True
                continue
            if self._at_start:
                stripped = self._buf.lstrip()
                if not stripped:
                    return out
                if stripped.startswith(OPEN):
                    self._buf, self._inside = stripped[len(OPEN):], True
                    continue
                if OPEN.startswith(stripped):
                    return out               # may still become <think>
                self._at_start = False
                self._buf = stripped
            out.append(self._buf)
            self._buf = ""
        return out

    def finish(self) -> list[str]:
        buf, self._buf = self._buf, ""
        if not buf:
            return []
        if self._inside:
            return _thought(buf)
        answer = buf.lstrip() if self._at_start else buf
        return [answer] if answer else []


def _thought(text: str) -> list[str]:
    return [Thought(text)] if text else []


def _partial_suffix(text: str, marker: str) -> int:
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def split_reasoning(text: str, starts_inside: bool) -> tuple[str, str]:
    """(reasoning, answer) of a whole reply."""
    stream = ReasoningStream(starts_inside)
    parts = stream.feed(text) + stream.finish()
    return ("".join(p for p in parts if isinstance(p, Thought)),
            "".join(p for p in parts if not isinstance(p, Thought)))
