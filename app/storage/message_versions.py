"""A message's versions: Regenerate adds one to an answer, Edit and resend one to a
user message (message_branches.py keeps the turns each one led to); "< 1/2 >" picks
one (no Qt).

A message's own fields always hold the selected version, so everything that reads
messages (the prompt, the sidebar snippet, search, export) sees what the user sees.
`Message.versions` keeps every version as a record of VERSION_FIELDS; the selected
entry is refreshed from the message's fields whenever it is read or stored.
"""
from __future__ import annotations

from app.storage.message import Message, MessageState

VERSION_FIELDS = ("content", "state", "ttft_s", "decode_tok_s", "num_tokens", "prompt_tokens",
                  "cached_tokens", "model", "error", "created_at")
# Fields versions stored by an older release may lack: None (not known), so a version
# never shows another one's value.
_OPTIONAL_FIELDS = ("cached_tokens",)
# A user message's version that is not shown keeps the turns that followed it here
# (message_branches.py); the shown one's are the conversation's next rows.
BRANCH = "branch"


def version_record(msg: Message) -> dict:
    return {name: getattr(msg, name) for name in VERSION_FIELDS}


def synced_versions(msg: Message) -> list[dict]:
    """Every version, the selected one as the message holds it now ([] if only one)."""
    if not msg.versions:
        return []
    versions = [dict(v) for v in msg.versions]
    versions[msg.version] = {**versions[msg.version], **version_record(msg)}   # BRANCH kept
    return versions


def num_versions(msg: Message) -> int:
    return max(1, len(msg.versions))


def with_version(msg: Message, index: int) -> Message:
    """`msg` showing version `index` (0-based); the others are kept as they are."""
    versions = synced_versions(msg) or [version_record(msg)]
    if not 0 <= index < len(versions):
        raise IndexError(f"message has {num_versions(msg)} version(s), not {index + 1}")
    record = {k: v for k, v in versions[index].items() if k in VERSION_FIELDS}
    return msg.copy(**record, versions=versions, version=index)


def with_new_version(msg: Message, model: str) -> Message:
    """`msg` with an empty streaming version added after the others and selected."""
    versions = synced_versions(msg) or [version_record(msg)]
    fresh = Message("assistant", state=MessageState.STREAMING, model=model, num_tokens=0)
    versions.append(version_record(fresh))
    # `msg` keeps its own index while the fresh one is selected: with_version first
    # refreshes the *selected* record from the message's fields, and those are the old
    # answer's (selecting the new index first wrote the old answer over the fresh one).
    return with_version(msg.copy(versions=versions), len(versions) - 1)


def records_from_json(data) -> list[dict]:
    """Stored versions, keeping only known fields; anything malformed reads as none."""
    if not isinstance(data, list) or not all(isinstance(v, dict) for v in data):
        return []
    records = []
    for v in data:
        record = {k: v.get(k) for k in VERSION_FIELDS if k in v or k in _OPTIONAL_FIELDS}
        if isinstance(v.get(BRANCH), list):
            record[BRANCH] = [m for m in v[BRANCH] if isinstance(m, dict)]
        records.append(record)
    return records
