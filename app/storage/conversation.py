"""A saved conversation's metadata and per-conversation settings (no Qt)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from engine.sampling_params import SamplingParams
from engine.settings_spec import chat_defaults, check_settings


@dataclass
class Conversation:
    title: str = "New chat"
    # Every setting of engine/settings_spec.py by name (system prompt, temperature, ...);
    # stored as one JSON column, so a new setting needs no schema change.
    settings: dict[str, Any] = field(default_factory=chat_defaults)
    id: int | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    pinned: bool = False         # kept at the top of the sidebar
    # A JSON schema every reply must follow, as its text ("" = off); checked by
    # engine/server/grammar.py:schema_from_text before it is kept.
    json_schema: str = ""
    snippet: str = ""            # last message text, for the sidebar (not stored)

    def __post_init__(self):
        # Missing settings take the chat default; a wrong one raises (ValueError/TypeError).
        self.settings = {**chat_defaults(), **check_settings(self.settings)}

    @property
    def system_prompt(self) -> str:
        return self.settings["system_prompt"]

    @property
    def schema(self) -> dict | None:
        """The JSON schema replies follow (None: off); ValueError if the stored text is
        not a JSON object (written by hand, or by a newer version)."""
        if not self.json_schema.strip():
            return None
        schema = json.loads(self.json_schema)
        if not isinstance(schema, dict):
            raise ValueError("This conversation's JSON schema is not a JSON object: "
                             "fix it in Conversation settings.")
        return schema

    def sampling_params(self) -> SamplingParams:
        return SamplingParams.from_settings(self.settings)

    def copy(self, **changes) -> Conversation:
        return replace(self, **changes)

    def with_settings(self, **values) -> Conversation:
        return replace(self, settings={**self.settings, **values})
