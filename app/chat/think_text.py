"""Split a model's reply into its <think> reasoning and its answer (no Qt)."""
from __future__ import annotations

from dataclasses import dataclass

OPEN, CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class ThinkText:
    reasoning: str        # text between <think> and </think> ("" if none)
    answer: str           # everything else
    thinking: bool        # True while <think> is open (still streaming reasoning)

    @property
    def has_reasoning(self) -> bool:
        return bool(self.reasoning.strip()) or self.thinking


def split_think(text: str) -> ThinkText:
    """Reasoning is the first <think> block; a reply may also open with an
    implicit think (templates that put <think> in the prompt) and only close it."""
    start = text.find(OPEN)
    end = text.find(CLOSE)
    if start == -1 and end == -1:
        return ThinkText("", text, False)
    if start == -1 or (end != -1 and end < start):        # implicit open
        return ThinkText(text[:end].strip(), text[end + len(CLOSE):].lstrip(), False)
    before = text[:start]
    body = text[start + len(OPEN):]
    close = body.find(CLOSE)
    if close == -1:
        return ThinkText(body.strip(), before.strip(), True)
    answer = (before + body[close + len(CLOSE):]).lstrip()
    return ThinkText(body[:close].strip(), answer, False)


def strip_think(text: str) -> str:
    """The answer alone, for feeding history back to the model."""
    return split_think(text).answer
