"""A saved conversation's metadata and per-conversation settings (no Qt)."""
from __future__ import annotations

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
    snippet: str = ""            # last message text, for the sidebar (not stored)

    def __post_init__(self):
        # Missing settings take the chat default; a wrong one raises (ValueError/TypeError).
        self.settings = {**chat_defaults(), **check_settings(self.settings)}

    @property
    def system_prompt(self) -> str:
        return self.settings["system_prompt"]

    def sampling_params(self) -> SamplingParams:
        return SamplingParams.from_settings(self.settings)

    def copy(self, **changes) -> Conversation:
        return replace(self, **changes)

    def with_settings(self, **values) -> Conversation:
        return replace(self, settings={**self.settings, **values})
