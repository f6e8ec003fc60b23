"""Check what a caller hands in as a prompt before any of it reaches a tokenizer or template.

A chat app passes user text straight through, so every failure here names the
message and field and says what to send instead (InvalidRequestError).
"""
from __future__ import annotations

from typing import Any

from engine.errors import InvalidRequestError

# Fields whose strings are a user's or model's words: checked, and kept as text when encoded.
TEXT_FIELDS = ("content", "reasoning_content", "thinking", "reasoning")


def check_text(text: str, where: str) -> str:
    """`text` unchanged if it is valid Unicode (UTF-8 encodable); otherwise say where it breaks."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        raise InvalidRequestError(
            f"{where} contains a lone surrogate (U+{ord(bad):04X}) at character {e.start}: "
            "it is not valid Unicode text. Remove it or decode the text properly "
            "(e.g. bytes.decode('utf-8', errors='replace')).") from None
    return text


def _check_parts(parts: list, where: str) -> None:
    # Multimodal-style content: [{"type": "text", "text": "..."}]; only text parts reach a model.
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
            raise InvalidRequestError(f"{where} part {j} must be a dict like "
                                      "{'type': 'text', 'text': '...'}, got " f"{_short(part)}.")
        if "text" in part:
            check_text(part["text"], f"{where} part {j}")


def _check_message(m: Any, i: int) -> None:
    where = f"message {i}"
    if not isinstance(m, dict):
        raise InvalidRequestError(f"{where} must be a dict with 'role' and 'content', "
                                  f"got {_short(m)}.")
    if not isinstance(m.get("role"), str) or not m["role"]:
        raise InvalidRequestError(f"{where} needs a 'role' string (system, user, assistant, "
                                  f"tool), got {_short(m.get('role'))}.")
    content = m.get("content")
    if content is None and not m.get("tool_calls"):
        raise InvalidRequestError(f"{where} ({m['role']}) has no content: send its text as a "
                                  "string ('' for an empty message).")
    if isinstance(content, list):
        _check_parts(content, f"{where} content")
    elif content is not None and not isinstance(content, str):
        raise InvalidRequestError(f"{where} ({m['role']}) content must be a string, got "
                                  f"{type(content).__name__} {_short(content)}.")
    for field in TEXT_FIELDS:
        value = m.get(field)
        if isinstance(value, str):
            check_text(value, f"{where} {field}")
        elif value is not None and field != "content":
            raise InvalidRequestError(f"{where} {field} must be a string, got "
                                      f"{type(value).__name__}.")


def check_messages(messages: list) -> list[dict]:
    """The messages unchanged if every one is well formed; raise InvalidRequestError otherwise."""
    for i, m in enumerate(messages):
        _check_message(m, i)
    return messages


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
