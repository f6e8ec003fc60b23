"""Per-request sampling settings: defaults and validation come from engine/settings_spec.py."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.settings_spec import SAMPLING, engine_default, sampling_values


@dataclass(frozen=True)
class SamplingParams:
    # One field per spec entry of kind "sampling" (a test keeps the two in step).
    max_tokens: int = engine_default("max_tokens")
    temperature: float = engine_default("temperature")      # 0 = greedy
    top_p: float = engine_default("top_p")
    top_k: int = engine_default("top_k")                    # 0 = off
    min_p: float = engine_default("min_p")
    repetition_penalty: float = engine_default("repetition_penalty")
    seed: int | None = engine_default("seed")
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        for s in SAMPLING:
            object.__setattr__(self, s.name, s.check(getattr(self, s.name)))
        object.__setattr__(self, "stop", _check_stop(self.stop))

    @classmethod
    def from_settings(cls, values: Mapping[str, Any], **overrides) -> SamplingParams:
        """From a conversation's settings mapping (other kinds, like the system prompt,
        are ignored)."""
        return cls(**{**sampling_values(values), **overrides})

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _check_stop(stop) -> tuple[str, ...]:
    """A tuple of non-empty strings (a lone string is one stop string)."""
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (tuple, list)):
        raise TypeError(f"stop must be a list of non-empty strings; got {stop!r}")
    for s in stop:
        if not isinstance(s, str):
            raise TypeError(f"stop must be a list of non-empty strings; got {s!r} "
                            f"({type(s).__name__}) in it")
        if not s:
            raise ValueError("stop strings must be non-empty (an empty one would stop "
                             "every reply at once)")
    return tuple(stop)

