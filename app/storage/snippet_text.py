"""The sidebar's one-line preview of a message: its text without Markdown marks or
reasoning (no Qt). "**Paris** is the `capital`" reads "Paris is the capital"."""
from __future__ import annotations

import re

from app.chat.think_text import strip_think

SNIPPET_CHARS = 120
_RULES = [
    (re.compile(r"```[^\n]*\n?"), " "),                        # code fences (language too)
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),            # images: their alt text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),             # links: their text
    (re.compile(r"<[^>\n]+>"), ""),                            # HTML tags
    (re.compile(r"(?m)^\s{0,3}(#{1,6}|>+|[-*+]|\d+[.)])\s+"), ""),  # headings, quotes, lists
    (re.compile(r"(?m)^\s*(\|?\s*:?-{3,}:?\s*)+\|?\s*$"), ""),  # table rules
    (re.compile(r"(?m)^\s*([-*_]\s*){3,}$"), ""),              # horizontal rules
    (re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # bold, strike
    (re.compile(r"(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])"), r"\2"),  # italics
    (re.compile(r"`+([^`]*)`+"), r"\1"),                       # inline code
    (re.compile(r"\s*\|\s*"), " "),                            # table cells
]


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """`text` as one line of plain words, at most `limit` characters."""
    text = strip_think(text)
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return " ".join(text.split())[:limit]
