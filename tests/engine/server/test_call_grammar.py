"""Forced-call grammars (both formats, with and without an open <think> block): random
walks through the grammar's masks always give text the tool-call parser reads back as a
call whose arguments validate against the function's schema."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
from qwen_fixtures import write_tokenizer

from engine.server.call_grammar import call_grammar
from engine.server.grammar import lark_grammar, make_grammar
from engine.tokenization.tokenizer import Tokenizer
from engine.tokenization.tool_calls import parse_tool_calls

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

FUNCTIONS = [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 5},
        "days": {"type": "integer", "minimum": 1, "maximum": 5},
        "unit": {"enum": ["c", "f"]},
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
        "required": ["city", "days"], "additionalProperties": False}},
    {"name": "ping", "parameters": {"type": "object", "properties": {},
                                    "additionalProperties": False}},
]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    write_tokenizer(folder)
    return Tokenizer.from_folder(folder)


def _walk(tok, rule: str, seed: int, steps: int = 400) -> str:
    rng = random.Random(seed)
    g = make_grammar(tok, tok.vocab_size, lark_grammar(rule), "tool_choice")
    out, script = [], []
    for step in range(steps):
        row = np.zeros((tok.vocab_size + 31) // 32, dtype=np.int32)
        g.fill_mask(row)
        allowed = np.nonzero(np.unpackbits(row.view(np.uint8), bitorder="little"))[0]
        # favour ending, so walks finish: EOS whenever the grammar allows it, and a
        # thought that has gone on for 20 tokens is closed
        eos = [t for t in allowed if t in tok.eos_token_ids]
        close = tok.encode("</think>")
        if step >= 20 and not script and close[0] in allowed and "<tool_call>" not in \
                tok.decode(out) and "</think>" not in tok.decode(out):
            script = close
        token = eos[0] if eos else (script.pop(0) if script else int(rng.choice(allowed)))
        assert token in allowed
        if token in tok.eos_token_ids:
            return tok.decode(out)
        g.accept(token)
        out.append(token)
    raise AssertionError(f"no end after {steps} tokens: {tok.decode(out)!r}")


@pytest.mark.parametrize("style", ["json", "xml"])
@pytest.mark.parametrize("thinking", [False, True])
def test_every_walk_is_a_valid_call(tok, style, thinking):
    rule = call_grammar(FUNCTIONS, parallel=False, style=style, thinking=thinking)
    by_name = {f["name"]: f["parameters"] for f in FUNCTIONS}
    for seed in range(8):
        text = _walk(tok, rule, seed)
        content, calls = parse_tool_calls(text)
        assert len(calls) == 1, text
        assert ("</think>" in content) == thinking
        jsonschema.validate(json.loads(calls[0].arguments), by_name[calls[0].name])
