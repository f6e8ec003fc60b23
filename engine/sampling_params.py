"""Per-request sampling settings."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 512
    temperature: float = 0.0        # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0                  # 0 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0 or not 0 <= self.min_p < 1 or self.repetition_penalty <= 0:
            raise ValueError("top_k >= 0, 0 <= min_p < 1, repetition_penalty > 0")
        if isinstance(self.stop, (list, str)):
            object.__setattr__(self, "stop", tuple([self.stop] if isinstance(self.stop, str)
                                                   else self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
