"""A saved conversation's metadata and per-conversation settings (no Qt)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace


@dataclass
class Conversation:
    title: str = "New chat"
    system_prompt: str = ""
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    id: int | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    snippet: str = ""            # last message text, for the sidebar (not stored)

    def copy(self, **changes) -> Conversation:
        return replace(self, **changes)
