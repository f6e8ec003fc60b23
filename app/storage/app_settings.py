"""User settings: engine limits, appearance and defaults for new conversations (no Qt).

Engine limits take their defaults from EngineConfig and the conversation defaults
from engine/settings_spec.py, so neither is restated here.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from engine.cache.kv_budget import MIB, machine_ram_bytes
from engine.config import EngineConfig
from engine.http_origin import check_origin
from engine.settings_spec import BY_NAME, chat_defaults, check_settings, settings_or_defaults

ENGINE_LIMITS = ("max_num_seqs", "kv_budget_mb", "prefill_chunk", "disk_cache_mb")
# Engine settings a running engine takes without a reload (Engine.set_reading_pace).
ENGINE_LIVE = ("min_stream_tok_s",)
# The reading-pace floor the Settings offer, tokens/s per streaming chat: past a few
# dozen it only delays new chats (a step of 1/100 s is already below most models' step).
MAX_STREAM_TOK_S = 100
API_SETTINGS = ("serve_api", "api_port", "api_cors_origin")
# A smaller KV cache holds a few pages: replies get cut after a few dozen tokens and
# prompts refused (issue 17 item 3), so the Settings never offer it.
MIN_KV_BUDGET_MB = 64
APPEARANCE = ("theme", "font_size")
# The mlx.launch hosts file the Settings check (engine/distributed/hosts_file.py); the
# app itself runs on this machine only: the Settings show the command that uses it.
DISTRIBUTED = ("hosts_file",)
THEME_CHOICES = ("system", "light", "dark")     # system: follow the OS's light/dark setting
FONT_SIZES = range(10, 23)                      # px; 13 is the default


@dataclass(frozen=True)
class AppSettings:
    # engine limits (applied when a model is loaded)
    max_num_seqs: int = EngineConfig.max_num_seqs
    # None = automatic: what the model can use, within a share of total memory
    kv_budget_mb: int | None = EngineConfig.kv_budget_mb
    prefill_chunk: int = EngineConfig.prefill_chunk
    # The prompt cache folder's budget; 0 = conversations are not cached on disk.
    disk_cache_mb: int = EngineConfig.disk_cache_mb
    # The reading pace other chats keep while a new prompt is read (applied at once).
    min_stream_tok_s: float = EngineConfig.min_stream_tok_s
    # appearance (applied at once)
    theme: str = "system"
    font_size: int = 13
    # settings a new conversation starts with, by spec name
    chat: dict[str, Any] = field(default_factory=chat_defaults)
    # the local OpenAI-compatible API (127.0.0.1 only)
    serve_api: bool = False
    api_port: int = 8000
    # A browser front-end's origin the API answers (CORS; "*" any, "" none: the default)
    api_cors_origin: str = ""
    # an mlx.launch hosts file ("" = none), for `python -m engine serve --hosts`
    hosts_file: str = ""

    def __post_init__(self):
        self.engine_config()        # the limits must make a valid EngineConfig
        if self.kv_budget_mb is not None and self.kv_budget_mb < MIN_KV_BUDGET_MB:
            raise ValueError(f"The KV cache memory must be at least {MIN_KV_BUDGET_MB} MB "
                             "(or Automatic).")
        if self.kv_budget_mb is not None and self.kv_budget_mb > max_kv_budget_mb():
            raise ValueError(f"The KV cache memory cannot be more than this machine's "
                             f"{max_kv_budget_mb():,} MB of memory (or choose Automatic).")
        if not 0 <= self.min_stream_tok_s <= MAX_STREAM_TOK_S:   # a number: engine_config
            raise ValueError(f"The reading pace must be 0 to {MAX_STREAM_TOK_S} tokens/s "
                             "(0: read new prompts as fast as possible).")
        if not isinstance(self.serve_api, bool) or not 1 <= self.api_port <= 65535:
            raise ValueError("serve_api is a bool and 1 <= api_port <= 65535")
        if not isinstance(self.api_cors_origin, str):
            raise ValueError("api_cors_origin is a string")
        if self.api_cors_origin:
            object.__setattr__(self, "api_cors_origin", check_origin(self.api_cors_origin))
        if self.theme not in THEME_CHOICES:
            raise ValueError(f"theme must be one of {', '.join(THEME_CHOICES)}, "
                             f"not {self.theme!r}")
        if not isinstance(self.font_size, int) or self.font_size not in FONT_SIZES:
            raise ValueError(f"font_size must be {FONT_SIZES.start}-{FONT_SIZES.stop - 1} px, "
                             f"not {self.font_size!r}")
        if not isinstance(self.hosts_file, str):
            raise ValueError(f"hosts_file must be a path, not {self.hosts_file!r}")
        object.__setattr__(self, "chat", {**chat_defaults(), **check_settings(self.chat)})

    def engine_config(self, cache_dir: str | None = None) -> EngineConfig:
        """The limits as an EngineConfig; cache_dir: the prompt cache folder (used
        unless the disk cache is off)."""
        limits = {k: getattr(self, k) for k in ENGINE_LIMITS + ENGINE_LIVE}
        if not self.disk_cache_mb:
            limits["disk_cache_mb"], cache_dir = EngineConfig.disk_cache_mb, None
        return EngineConfig(**limits, cache_dir=cache_dir)

    def with_chat(self, **values) -> AppSettings:
        """These settings with some new-conversation defaults changed."""
        return replace(self, chat={**self.chat, **values})

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in
                   ENGINE_LIMITS + ENGINE_LIVE + API_SETTINGS + APPEARANCE + DISTRIBUTED},
                "chat": dict(self.chat)}

    @classmethod
    def from_dict(cls, data: dict) -> AppSettings:
        """From to_dict's output, or from the older flat form (chat defaults at the top
        level, `num_pages`, dropped now that the KV pool is sized from a budget in MB).
        A bad engine limit falls back to the defaults; a bad chat value, reading pace or
        appearance setting to its default."""
        chat = {k: v for k, v in data.items() if k in BY_NAME}
        if isinstance(data.get("chat"), dict):
            chat.update(data["chat"])
        limits = {f.name: data[f.name] for f in fields(cls)
                  if f.name in ENGINE_LIMITS + API_SETTINGS and f.name in data}
        looks = {k: data[k] for k in ENGINE_LIVE + APPEARANCE + DISTRIBUTED
                 if k in data and _valid(k, data[k])}
        try:
            return cls(**limits, **looks, chat=settings_or_defaults(chat))
        except (TypeError, ValueError):
            return cls(**looks, chat=settings_or_defaults(chat))


def max_kv_budget_mb() -> int:
    """The largest KV budget Settings accept: the machine's memory, in MB."""
    return machine_ram_bytes() // MIB


def _valid(name: str, value) -> bool:
    try:
        AppSettings(**{name: value})
    except (TypeError, ValueError):
        return False
    return True
