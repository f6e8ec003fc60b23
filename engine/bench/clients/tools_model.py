"""A model whose chat template has a tool format, for the tool-call checks: the built-in
SmolLM2's template never reads `tools` (the server answers 400), so those checks run on
a tiny random Llama with Qwen3's shipped template, written with the test suite's own
helpers (tests/engine). A random model does not call tools by itself: the checks force
a call (tool_choice "required", a grammar) and read it back through each client."""
from __future__ import annotations

import json
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[3] / "tests" / "engine"


def write_tools_model(folder: Path) -> Path:
    sys.path.insert(0, str(TESTS))
    from test_tokenizer import QWEN3
    from tiny_models import write_tiny_llama
    folder = write_tiny_llama(folder / "tiny-qwen3-template")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "chat_template": QWEN3}))
    return folder
