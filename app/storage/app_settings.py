"""User settings: engine limits and defaults for new conversations (no Qt)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class AppSettings:
    # engine limits (applied when a model is loaded)
    max_num_seqs: int = 8
    num_pages: int = 2048
    prefill_chunk: int = 512
    # defaults for new conversations
    system_prompt: str = "You are a helpful assistant."
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    # the local OpenAI-compatible API (127.0.0.1 only)
    serve_api: bool = False
    api_port: int = 8000

    def __post_init__(self):
        if min(self.max_num_seqs, self.prefill_chunk, self.max_tokens) < 1:
            raise ValueError("limits and max tokens must be >= 1")
        if self.num_pages < 2:
            raise ValueError("KV budget needs at least 2 pages")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("temperature >= 0 and 0 < top_p <= 1")
        if not isinstance(self.serve_api, bool) or not 1 <= self.api_port <= 65535:
            raise ValueError("serve_api is a bool and 1 <= api_port <= 65535")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> AppSettings:
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except (TypeError, ValueError):
            return cls()
