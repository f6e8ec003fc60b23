"""Reasoning split from the answer on scripted thinking-model replies, whole and streamed."""
from __future__ import annotations

import pytest

from engine.tokenization.reasoning import ReasoningStream, Thought, split_reasoning

CASES = [
    # (reply, prompt leaves <think> open, reasoning, answer)
    ("Let me think.\n</think>\n\nParis.", True, "Let me think.\n", "Paris."),
    ("<think>\nhmm\n</think>\n\nParis.", False, "\nhmm\n", "Paris."),
    ("\n<think>x</think>Paris.", False, "x", "Paris."),
    ("Paris.", False, "", "Paris."),
    ("a <think> in the middle stays", False, "", "a <think> in the middle stays"),
    ("still thinking when cut", True, "still thinking when cut", ""),
    ("</think>\n\n<tool_call>{}</tool_call>", True, "", "<tool_call>{}</tool_call>"),
    ("<thin", False, "", "<thin"),
    ("< 3 is small", False, "", "< 3 is small"),
]


@pytest.mark.parametrize("reply,inside,reasoning,answer", CASES)
def test_whole(reply, inside, reasoning, answer):
    assert split_reasoning(reply, inside) == (reasoning, answer)


@pytest.mark.parametrize("reply,inside,reasoning,answer", CASES)
@pytest.mark.parametrize("step", [1, 2, 5])
def test_streamed_in_pieces_gives_the_same(reply, inside, reasoning, answer, step):
    stream = ReasoningStream(inside)
    parts = []
    for i in range(0, len(reply), step):
        parts += stream.feed(reply[i:i + step])
    parts += stream.finish()
    assert "".join(p for p in parts if isinstance(p, Thought)) == reasoning
    assert "".join(p for p in parts if not isinstance(p, Thought)) == answer
    assert all(parts)
