"""Errors a user can cause: each message says what is wrong and what to do."""
from __future__ import annotations


class TandemError(Exception):
    """Base of every user-facing engine error."""


class ModelLoadError(TandemError):
    """A model folder or file cannot be read (missing, truncated, wrong shapes)."""


class UnsupportedModelError(ModelLoadError):
    """The architecture is not one Tandem implements."""


class DefaultModelMissingError(ModelLoadError):
    """The built-in default model's package is not installed."""


class PromptTooLongError(TandemError):
    """The prompt (plus the tokens asked for) does not fit the context."""


class EngineClosedError(TandemError):
    """The engine was closed; load a model again."""


class InvalidRequestError(TandemError):
    """A prompt or message the engine cannot take as given (wrong type, invalid text)."""


class ServerStartError(TandemError):
    """The API server could not listen on its address (port taken, bad host)."""


class MemoryBudgetError(TandemError):
    """The KV budget asks for more memory than the machine has left after the weights."""
