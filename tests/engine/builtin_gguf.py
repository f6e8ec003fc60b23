"""The built-in model's GGUF file for tests, or a skip when it is not installed."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from engine.errors import DefaultModelMissingError
from engine.loading.default_model import default_model_path


def builtin_gguf() -> Path:
    """Path of the built-in SmolLM2 .gguf; skips the test when it is not there."""
    try:
        path = default_model_path()
    except DefaultModelMissingError:
        pytest.skip("built-in model not installed (make test installs it)")
    if path.suffix != ".gguf":
        pytest.skip(f"built-in model at {path} is not a .gguf file")
    return path


@lru_cache(maxsize=1)
def _metadata(path: str) -> dict:
    import mlx.core as mx
    return mx.load(path, return_metadata=True)[1]


def builtin_tokenizer():
    """The engine's Tokenizer built from the built-in GGUF's metadata."""
    from engine.tokenization.tokenizer import Tokenizer
    return Tokenizer.from_gguf(_metadata(str(builtin_gguf())))
