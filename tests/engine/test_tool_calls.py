"""The tool-call parser on scripted model outputs, whole and streamed in every split."""
from __future__ import annotations

import json

import pytest

from engine.tokenization.tool_calls import ToolCall, ToolCallStream, parse_tool_calls

QWEN_ONE = ('Let me check.\n\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Zürich", "unit": "c"}}\n</tool_call>')
QWEN_TWO = ('<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "b", "arguments": {"x": [1, 2]}}\n</tool_call>')
CODER = ('<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n'
         '<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>')

CASES = [
    (QWEN_ONE, "Let me check.", [("get_weather", {"city": "Zürich", "unit": "c"})]),
    (QWEN_TWO, "", [("a", {}), ("b", {"x": [1, 2]})]),
    (CODER, "", [("get_weather", {"city": "Paris", "days": 3})]),
    ("no calls here <tool_ at all", "no calls here <tool_ at all", []),
    ("a < b and <tool_call>not json</tool_call> c",
     "a < b and<tool_call>not json</tool_call> c", []),
    # the model stopped (EOS) before closing its call
    ('<tool_call>\n{"name": "f", "arguments": {"q": 1}}\n', "", [("f", {"q": 1})]),
    ('<tool_call>{"name": "f", "arguments": "{\\"q\\": 2}"}</tool_call>', "", [("f", {"q": 2})]),
    ('<tool_call>{"name": "f", "parameters": {"q": 3}}</tool_call>', "", [("f", {"q": 3})]),
    ("plain text ending in space  ", "plain text ending in space  ", []),
]


def _calls(calls: list[ToolCall]):
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("text,content,calls", CASES)
def test_whole_reply(text, content, calls):
    got_content, got_calls = parse_tool_calls(text)
    assert got_content == content and _calls(got_calls) == calls


@pytest.mark.parametrize("text,content,calls", CASES)
@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_streamed_in_pieces_gives_the_same(text, content, calls, step):
    stream = ToolCallStream()
    parts = []
    for i in range(0, len(text), step):
        parts += stream.feed(text[i:i + step])
    parts += stream.finish()
    assert "".join(p for p in parts if isinstance(p, str)) == content
    assert _calls([p for p in parts if isinstance(p, ToolCall)]) == calls


def test_text_before_a_call_streams_before_the_call_is_complete():
    stream = ToolCallStream()
    assert stream.feed("Sure, ") == ["Sure,"]
    assert stream.feed("one moment.\n<tool") == [" one moment."]
    assert stream.feed('_call>{"name": "f", "arguments": {}}') == []
    out = stream.feed("</tool_call>")
    assert len(out) == 1 and out[0].name == "f" and out[0].id.startswith("call_")


def test_openai_shape():
    call = ToolCall("f", '{"a": 1}', id="call_x")
    assert call.openai(0) == {"index": 0, "id": "call_x", "type": "function",
                              "function": {"name": "f", "arguments": '{"a": 1}'}}
