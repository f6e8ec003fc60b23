"""Structured output through llguidance: a grammar's token mask for one request.

llguidance (the grammar engine llama.cpp, vLLM and SGLang use) reads the model's own
tokenizer.json, so the mask is exact for byte-level BPE vocabularies, added tokens
included. `Grammar` is a TokenConstraint (engine/sampling_params.py): the batched
sampler asks it for a bitmask row each step and feeds it the sampled token.
"""
from __future__ import annotations

import json
import threading
from functools import lru_cache

from engine.server.api_error import bad_request

_LOCK = threading.Lock()
_JSON_OPTIONS = {"whitespace_flexible": False}   # no runs of spaces a small model loops on


def available() -> bool:
    try:
        import llguidance  # noqa: F401
    except ImportError:
        return False
    return True


class Grammar:
    """One request's matcher: fill_mask / accept / rollback (engine thread only)."""

    def __init__(self, matcher, eos_ids: list[int]):
        self._matcher = matcher
        self._eos = eos_ids

    def fill_mask(self, bitmask_row) -> None:
        import llguidance.numpy as llnp
        if self._matcher.is_error():
            self._only_eos(bitmask_row)
            return
        llnp.fill_next_token_bitmask(self._matcher, bitmask_row[None, :], 0)
        if not bitmask_row.any():                  # nothing fits: end the reply
            self._only_eos(bitmask_row)

    def _only_eos(self, row) -> None:
        row[:] = 0
        for t in self._eos:
            row[t // 32] |= _bit(t % 32)

    def accept(self, token_id: int) -> None:
        if not self._matcher.is_error() and not self._matcher.is_stopped():
            self._matcher.consume_token(token_id)

    def rollback(self, num_tokens: int) -> None:
        self._matcher.rollback(num_tokens)

    @property
    def error(self) -> str | None:
        return self._matcher.get_error() if self._matcher.is_error() else None


def _bit(i: int):
    import numpy as np
    return np.uint32(1 << i).view(np.int32)


def json_schema_grammar(schema: dict) -> str:
    import llguidance
    return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)


def lark_grammar(lark: str) -> str:
    import llguidance
    return llguidance.LLMatcher.grammar_from_lark(lark)


def make_grammar(tokenizer, vocab_size: int, grammar: str, param: str) -> Grammar:
    """A matcher for `grammar` (llguidance's JSON form); a grammar it cannot build is a
    400 naming `param`."""
    try:
        return build_grammar(tokenizer, vocab_size, grammar)
    except ValueError as e:
        raise bad_request(f"'{param}' cannot be turned into a grammar: {e}", param) from e


def build_grammar(tokenizer, vocab_size: int, grammar: str) -> Grammar:
    """A matcher for `grammar` over the model's vocabulary; ValueError saying why not."""
    import llguidance
    eos = sorted(tokenizer.eos_token_ids)
    lltok = _lltokenizer(tokenizer, vocab_size)
    ok, warnings = _validate(lltok, grammar)
    if not ok:
        raise ValueError(warnings)
    matcher = llguidance.LLMatcher(lltok, grammar, log_level=0)
    if matcher.is_error():
        raise ValueError(matcher.get_error())
    return Grammar(matcher, eos)


def schema_from_text(text: str) -> dict:
    """The JSON schema `text` holds, checked as a request's `json_schema` is (a grammar
    llguidance can build); ValueError with a message for the person who wrote it.
    Needs no model: the app checks a conversation's schema before it keeps it."""
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise ValueError(f"This is not JSON: {e}.") from None
    if not isinstance(schema, dict):
        raise ValueError("A JSON schema is an object ({...}); this is "
                         f"{type(schema).__name__}.")
    if not available():
        raise ValueError("Replies that follow a JSON schema need the grammar engine "
                         "(llguidance), which is not installed: pip install llguidance.")
    import llguidance
    try:
        rule = json_schema_grammar(schema)
    except ValueError as e:
        raise ValueError(f"The schema cannot be used: {e}") from None
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(rule, None)
    if is_error:
        raise ValueError("The schema cannot be used: " + "; ".join(messages))
    return schema


def warm(tokenizer, vocab_size: int) -> None:
    """Build the model's llguidance tokenizer now (cached), so the first grammar for it
    does not wait: ~0.2 s for a 49k vocabulary, seconds for Qwen3.5's 248k."""
    _lltokenizer(tokenizer, vocab_size)


def _validate(lltok, grammar: str) -> tuple[bool, str]:
    import llguidance
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, lltok)
    return not is_error, "; ".join(messages)


def _lltokenizer(tokenizer, vocab_size: int):
    with _LOCK:
        return _cached_lltokenizer(tokenizer, vocab_size)


@lru_cache(maxsize=4)
def _cached_lltokenizer(tokenizer, vocab_size: int):
    """~0.2 s for a 50k vocabulary: once per loaded model (keyed by the Tokenizer)."""
    import llguidance
    return llguidance.LLTokenizer(tokenizer.backend_json(), n_vocab=vocab_size,
                                  eos_token=sorted(tokenizer.eos_token_ids))


def schema_text(schema: object) -> str:
    return json.dumps(schema, ensure_ascii=False)
