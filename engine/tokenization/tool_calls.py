"""Tool calls in a model's reply: `<tool_call>...</tool_call>` blocks, whole or streamed.

Two bodies are read inside a block: Hermes / Qwen2.5-3.6 JSON
(`{"name": "f", "arguments": {...}}`) and Qwen3-Coder's XML
(`<function=f><parameter=x>1</parameter></function>`). A block that is neither stays
in the reply's text, so nothing the model wrote is lost. A last block the model did
not close (it stopped at EOS) is read too.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)",
                        re.S)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str                 # JSON text of an object, as OpenAI sends it
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def openai(self, index: int | None = None) -> dict:
        out = {"id": self.id, "type": "function",
               "function": {"name": self.name, "arguments": self.arguments}}
        return out if index is None else {"index": index, **out}


def parse_block(body: str) -> ToolCall | None:
    """One block's body as a call, or None when it is not one."""
    body = body.strip()
    if body.startswith("{"):
        return _json_call(body)
    found = _FUNCTION.search(body)
    if found is None:
        return None
    args = {name: _value(v) for name, v in _PARAMETER.findall(found.group(2))}
    return ToolCall(found.group(1), json.dumps(args, ensure_ascii=False))


def _json_call(body: str) -> ToolCall | None:
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return ToolCall(obj["name"], args)
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def _value(text: str):
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """(the text outside the calls, the calls) of a whole reply."""
    stream = ToolCallStream()
    parts = stream.feed(text) + stream.finish()
    content = "".join(p for p in parts if isinstance(p, str))
    return content, [p for p in parts if isinstance(p, ToolCall)]


class ToolCallStream:
    """Feed text deltas; get back text (str) and ToolCall items in order. Text that may
    be the start of `<tool_call>` is held until it is known not to be."""

    def __init__(self):
        self._buf = ""
        self._inside = False
        self.num_calls = 0

    @property
    def in_call(self) -> bool:
        """A `<tool_call>` is open: its body is held until it closes (or the reply ends)."""
        return self._inside

    def feed(self, delta: str) -> list:
        self._buf += delta
        out: list = []
        while True:
            if self._inside:
                end = self._buf.find(CLOSE)
                if end < 0:
                    return out
                out += self._block(self._buf[:end], closed=True)
                self._buf, self._inside = self._buf[end + len(CLOSE):], False
                continue
            start = self._buf.find(OPEN)
            if start < 0:
                keep = _partial_suffix(self._buf, OPEN)
                cut = len(self._buf) - keep
                head, ws = _split_trailing_space(self._buf[:cut])
                self._buf = ws + self._buf[cut:]    # held: it may precede a call
                return out + ([head] if head else [])
            head = self._buf[:start]
            if head.strip():                       # space before a call is not content
                out.append(head.rstrip())
            self._buf, self._inside = self._buf[start + len(OPEN):], True

    def finish(self) -> list:
        """The end of the reply: an unclosed call is read if it parses; text is released."""
        buf, self._buf = self._buf, ""
        if self._inside:
            self._inside = False
            return self._block(buf, closed=False)
        return [buf] if buf and not (self.num_calls and not buf.strip()) else []

    def _block(self, body: str, closed: bool) -> list:
        call = parse_block(body)
        if call is None:
            return [OPEN + body + (CLOSE if closed else "")]
        self.num_calls += 1
        return [call]


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _split_trailing_space(text: str) -> tuple[str, str]:
    stripped = text.rstrip()
    return stripped, text[len(stripped):]
