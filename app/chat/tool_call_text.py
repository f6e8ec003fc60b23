"""Split a model's answer into its text and its tool calls (no Qt), with the parser the
API server uses (engine/tokenization/tool_calls.py), so a reply shows the calls the
server would send a client as `tool_calls`."""
from __future__ import annotations

import json
from dataclasses import dataclass

from engine.tokenization.tool_calls import ToolCall, ToolCallStream


@dataclass(frozen=True)
class CallText:
    text: str                       # the answer outside its calls
    calls: tuple[ToolCall, ...]     # in the order the model wrote them
    pending: bool                   # a call is still being written (streaming)


def split_tool_calls(answer: str, streaming: bool = False) -> CallText:
    """While streaming, an open `<tool_call>` is `pending` (its body is not shown as
    text); once the reply is over, an unclosed call is read if it parses, else its
    text is kept, as the server does."""
    stream = ToolCallStream()
    parts = stream.feed(answer)
    pending = streaming and stream.in_call
    if not streaming:
        parts += stream.finish()
    text = "\n\n".join(p for p in parts if isinstance(p, str))
    return CallText(text, tuple(p for p in parts if isinstance(p, ToolCall)), pending)


def pretty_arguments(call: ToolCall) -> str:
    """The call's arguments indented as JSON; as written when they are not JSON."""
    try:
        return json.dumps(json.loads(call.arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return call.arguments
