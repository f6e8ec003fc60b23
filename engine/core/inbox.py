"""Messages to the engine thread, one frozen class per kind (dispatched by type)."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from engine.core.step_loop import Request


@dataclass(frozen=True)
class Submit:
    request: Request


@dataclass(frozen=True)
class Cancel:
    request_id: int


@dataclass(frozen=True)
class Logits:
    """All logits of one sequence, computed in a private cache, into `future`."""
    token_ids: tuple[int, ...]
    future: Future


@dataclass(frozen=True)
class CacheNotice:
    """From the disk cache's writer thread: a message for the listeners."""
    message: str


@dataclass(frozen=True)
class SetReadingPace:
    """A new reading-pace floor (EngineConfig.min_stream_tok_s), from the next step on:
    the prefill budget's measured rates stay, only the floor they are spent against moves."""
    min_stream_tok_s: float


@dataclass(frozen=True)
class Close:
    pass


Message = Submit | Cancel | Logits | CacheNotice | SetReadingPace | Close
