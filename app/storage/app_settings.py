"""User settings: engine limits and defaults for new conversations (no Qt).

Engine limits take their defaults from EngineConfig and the conversation defaults
from engine/settings_spec.py, so neither is restated here.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from engine.config import EngineConfig
from engine.settings_spec import BY_NAME, chat_defaults, check_settings, settings_or_defaults

ENGINE_LIMITS = ("max_num_seqs", "kv_budget_mb", "prefill_chunk", "disk_cache_mb")


@dataclass(frozen=True)
class AppSettings:
    # engine limits (applied when a model is loaded)
    max_num_seqs: int = EngineConfig.max_num_seqs
    kv_budget_mb: int | None = EngineConfig.kv_budget_mb    # None = sized from free memory
    prefill_chunk: int = EngineConfig.prefill_chunk
    # The prompt cache folder's budget; 0 = conversations are not cached on disk.
    disk_cache_mb: int = EngineConfig.disk_cache_mb
    # settings a new conversation starts with, by spec name
    chat: dict[str, Any] = field(default_factory=chat_defaults)

    def __post_init__(self):
        self.engine_config()        # the limits must make a valid EngineConfig
        object.__setattr__(self, "chat", {**chat_defaults(), **check_settings(self.chat)})

    def engine_config(self, cache_dir: str | None = None) -> EngineConfig:
        """The limits as an EngineConfig; cache_dir: the prompt cache folder (used
        unless the disk cache is off)."""
        limits = {k: getattr(self, k) for k in ENGINE_LIMITS}
        if not self.disk_cache_mb:
            limits["disk_cache_mb"], cache_dir = EngineConfig.disk_cache_mb, None
        return EngineConfig(**limits, cache_dir=cache_dir)

    def with_chat(self, **values) -> AppSettings:
        """These settings with some new-conversation defaults changed."""
        return replace(self, chat={**self.chat, **values})

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in ENGINE_LIMITS}, "chat": dict(self.chat)}

    @classmethod
    def from_dict(cls, data: dict) -> AppSettings:
        """From to_dict's output, or from the older flat form (chat defaults at the top
        level, `num_pages`, dropped now that the KV pool is sized from a budget in MB).
        A bad engine limit falls back to the defaults; a bad chat value to its default."""
        chat = {k: v for k, v in data.items() if k in BY_NAME}
        if isinstance(data.get("chat"), dict):
            chat.update(data["chat"])
        limits = {f.name: data[f.name] for f in fields(cls)
                  if f.name in ENGINE_LIMITS and f.name in data}
        try:
            return cls(**limits, chat=settings_or_defaults(chat))
        except (TypeError, ValueError):
            return cls(chat=settings_or_defaults(chat))
