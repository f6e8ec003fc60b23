"""Edit and resend and Regenerate keep what they replace: the message gets a new
version, and the version it had keeps the turns that followed it (its branch), so
"‹ 1/2 ›" brings an old question, or an old answer, back with the turns built on it
(no Qt).

The shown version's branch is the conversation's rows after the message; every other
version holds its branch in its record under BRANCH, as message records (their own
versions, and branches, nested)."""
from __future__ import annotations

from app.storage.message import Message
from app.storage.message_versions import (
    BRANCH,
    records_from_json,
    synced_versions,
    version_record,
    with_version,
)

_FIELDS = ("role", "content", "state", "ttft_s", "decode_tok_s", "num_tokens",
           "prompt_tokens", "cached_tokens", "model", "error", "created_at")


def to_record(msg: Message) -> dict:
    """`msg` as plain data (no row id: a branch's rows get new ones when shown)."""
    return {**{k: getattr(msg, k) for k in _FIELDS}, "versions": synced_versions(msg),
            "version": msg.version}


def from_record(record: dict) -> Message:
    values = {k: record[k] for k in _FIELDS if k in record}
    versions = records_from_json(record.get("versions"))
    version = record.get("version")
    version = version if isinstance(version, int) and 0 <= version < len(versions) else 0
    return Message(**{"role": "user", **values}, versions=versions, version=version)


def with_branch_kept(msg: Message, tail: list[Message]) -> Message:
    """`msg` whose shown version keeps `tail` (the turns after it) as its branch, before
    a new version replaces it (Regenerate: with_new_version then adds it)."""
    versions = synced_versions(msg) or [version_record(msg)]
    versions[msg.version][BRANCH] = [to_record(m) for m in tail]
    return msg.copy(versions=versions)


def with_edit(msg: Message, text: str, tail: list[Message]) -> Message:
    """`msg` showing a new version with `text`; the old one keeps `tail` (the turns
    after it) as its branch."""
    kept = with_branch_kept(msg, tail)
    versions = kept.versions + [version_record(Message("user", text))]
    return with_version(kept.copy(versions=versions), len(versions) - 1)


def with_branch(msg: Message, index: int, tail: list[Message]) -> tuple[Message, list[Message]]:
    """`msg` showing version `index`, and the turns to show after it; the version shown
    until now keeps `tail` as its branch."""
    versions = synced_versions(msg) or [version_record(msg)]
    if not 0 <= index < len(versions):
        raise IndexError(f"message has {len(versions)} version(s), not {index + 1}")
    versions[msg.version][BRANCH] = [to_record(m) for m in tail]
    branch = versions[index].pop(BRANCH, [])
    shown = with_version(msg.copy(versions=versions), index)
    return shown, [from_record(r) for r in branch if isinstance(r, dict)]
