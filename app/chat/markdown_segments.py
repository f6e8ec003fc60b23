"""Cut Markdown into prose and fenced code blocks, so code gets its own widget
with a copy button while prose renders through QTextDocument (no Qt here)."""
from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^(\s{0,3})(`{3,}|~{3,})\s*([\w+#.-]*)[^\n]*$")


@dataclass(frozen=True)
class Segment:
    kind: str            # "text" | "code"
    text: str
    language: str = ""
    closed: bool = True  # False for a code block still streaming


def split_markdown(source: str) -> list[Segment]:
    segments: list[Segment] = []
    prose: list[str] = []
    lines = source.split("\n")
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            prose.append(lines[i])
            i += 1
            continue
        fence, language = match.group(2), match.group(3)
        code, i, closed = _read_code(lines, i + 1, fence)
        _flush(prose, segments)
        segments.append(Segment("code", "\n".join(code), language, closed))
    _flush(prose, segments)
    return segments


def _read_code(lines: list[str], i: int, fence: str) -> tuple[list[str], int, bool]:
    code = []
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith(fence[0] * len(fence)) and set(stripped) <= {fence[0]}:
            return code, i + 1, True
        code.append(lines[i])
        i += 1
    return code, i, False


def _flush(prose: list[str], segments: list[Segment]) -> None:
    text = "\n".join(prose).strip("\n")
    if text.strip():
        segments.append(Segment("text", text))
    prose.clear()
