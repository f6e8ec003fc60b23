"""What a conversation sends the engine, and how much of the context it fills (no Qt)."""
from __future__ import annotations

from app.chat.think_text import strip_think
from app.storage.conversation import Conversation
from app.storage.message import Message


def prompt_messages(conversation: Conversation, messages: list[Message],
                    upto: int | None = None) -> list[dict]:
    """The conversation before row `upto` (all of it when None), as chat messages:
    the system prompt first, answers without their reasoning."""
    prompt = []
    if conversation.system_prompt.strip():
        prompt.append({"role": "system", "content": conversation.system_prompt})
    for msg in messages[:upto]:
        content = strip_think(msg.content) if msg.role == "assistant" else msg.content
        if content.strip():
            prompt.append({"role": msg.role, "content": content})
    return prompt


def context_tokens(messages: list[Message]) -> int | None:
    """Tokens the conversation fills in its context: the latest answer's prompt and
    its own tokens (what the next turn reads again); None before any answer says."""
    for msg in reversed(messages):
        if msg.role == "assistant" and msg.prompt_tokens is not None:
            return msg.prompt_tokens + (msg.num_tokens or 0)
    return None
