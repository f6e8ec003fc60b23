"""Where the server finds the engine: it serves one it is given, never one it owns.

The app's EngineBridge already has this shape (`engine` is None while a model
loads or after a load failed); standalone `serve` uses EngineHolder.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engine.core.engine import Engine


class EngineSource(Protocol):
    engine: Engine | None     # None while loading (503) or when no model is loaded
    loading: bool


@dataclass
class EngineHolder:
    """A mutable EngineSource: set `engine` when the load finishes."""
    engine: Engine | None = None
    loading: bool = True
