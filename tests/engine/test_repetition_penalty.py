"""The repetition penalty end to end: a real tiny engine decoding greedily with a
penalty, batched with a request without one (which the step loop pipelines),
against an independent float32 reference that decodes step by step from
Engine.logits and penalises by hand."""
from __future__ import annotations

import numpy as np
import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.core.sampler import NUM_RECENT

PROMPT = [5, 9, 5, 9, 5, 9, 12]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = write_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")
    with Engine.load(folder, EngineConfig(num_pages=128, page_size=4, max_context=200,
                                          max_decode_slowdown=1e9)) as e:
        yield e


def reference(engine, penalty: float) -> list[int]:
    """Greedy decode, one full forward per token, penalty applied in numpy; ends at
    EOS (kept, as the engine keeps it) or after MAX_TOKENS."""
    ids = list(PROMPT)
    out = []
    for _ in range(MAX_TOKENS):
        logits = np.array(engine.logits(ids)[-1], dtype=np.float32)   # [V]
        for t in set(ids[-NUM_RECENT:]):          # CTRL: each seen id once
            logits[t] = logits[t] / penalty if logits[t] > 0 else logits[t] * penalty
        token = int(np.argmax(logits))
        out.append(token)
        ids.append(token)
        if token in engine.tokenizer.eos_token_ids:
            break
    return out


def test_penalised_greedy_decode_matches_a_step_by_step_reference(engine):
    want = reference(engine, 1.8)
    assert want != reference(engine, 1.0), "the penalty must change this decode"
    plain = engine.submit([1, 2, 3], SamplingParams(max_tokens=40))
    handle = engine.submit(PROMPT, SamplingParams(max_tokens=MAX_TOKENS,
                                                  repetition_penalty=1.8))
    got = handle.result()
    plain.result()
    assert list(got.token_ids) == want


def test_penalised_request_joining_a_running_stream_matches_too(engine):
    want = reference(engine, 1.8)
    plain = engine.submit([1, 2, 3], SamplingParams(max_tokens=60))
    next(iter(plain))                          # the plain stream is decoding already
    got = engine.submit(PROMPT, SamplingParams(max_tokens=MAX_TOKENS,
                                               repetition_penalty=1.8)).result()
    plain.result()
    assert list(got.token_ids) == want
