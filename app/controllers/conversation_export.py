"""A conversation as Markdown (to read or share) or JSON (everything, to keep or
process), no Qt. Markdown shows the answers as selected; JSON keeps every version."""
from __future__ import annotations

import json
import time

from app.chat.think_text import split_think
from app.storage.conversation import Conversation
from app.storage.message import Message
from app.storage.message_versions import synced_versions

FORMAT_VERSION = 1
_ROLE_HEADINGS = {"user": "You", "assistant": "Assistant"}


def to_markdown(conv: Conversation, messages: list[Message]) -> str:
    lines = [f"# {conv.title}", "", f"*Exported from Tandem on {_date(time.time())}*", ""]
    if conv.system_prompt.strip():
        lines += ["**System prompt:**", "", _quote(conv.system_prompt), ""]
    for msg in messages:
        lines += [_heading(msg), "", _body(msg).strip() or "*(empty)*", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def to_json(conv: Conversation, messages: list[Message]) -> str:
    data = {
        "format": "tandem-conversation", "format_version": FORMAT_VERSION,
        "title": conv.title, "created_at": conv.created_at, "updated_at": conv.updated_at,
        "settings": conv.settings,
        "messages": [_message_dict(m) for m in messages],
    }
    if conv.json_schema:            # the schema its replies followed, as written
        data["json_schema"] = conv.json_schema
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _message_dict(msg: Message) -> dict:
    data = {"role": msg.role, "content": msg.content, "state": msg.state,
            "created_at": msg.created_at}
    if msg.role == "assistant":
        data.update(model=msg.model, num_tokens=msg.num_tokens, prompt_tokens=msg.prompt_tokens,
                    ttft_s=msg.ttft_s, decode_tok_s=msg.decode_tok_s, error=msg.error)
        versions = synced_versions(msg)
        if versions:
            data.update(versions=versions, selected_version=msg.version)
    return data


def _heading(msg: Message) -> str:
    name = _ROLE_HEADINGS.get(msg.role, msg.role.title())
    if msg.role == "assistant" and msg.model:
        name += f" ({msg.model})"
    if len(msg.versions) > 1:
        name += f", answer {msg.version + 1} of {len(msg.versions)}"
    return f"## {name}"


def _body(msg: Message) -> str:
    if msg.role != "assistant":
        return msg.content
    parts = split_think(msg.content)
    if not parts.has_reasoning:
        return parts.answer
    return f"<details><summary>Reasoning</summary>\n\n{parts.reasoning.strip()}\n\n" \
           f"</details>\n\n{parts.answer}"


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in text.splitlines())


def _date(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def suggested_name(conv: Conversation, extension: str) -> str:
    """A file name from the title: 'Rivers meeting.md'."""
    safe = "".join(c if c.isalnum() or c in " -_" else " " for c in conv.title)
    return (" ".join(safe.split())[:60] or "Chat") + "." + extension
