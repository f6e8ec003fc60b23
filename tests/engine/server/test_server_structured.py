"""response_format (llguidance grammars as per-row masks), logprobs and logit_bias through
the official openai client, on the tiny random model."""
from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai
import pytest
from server_harness import EventLog

from engine import SamplingParams

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

ASK = [{"role": "user", "content": "hello world, the quick brown fox"}]


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["string", "integer", "boolean", "enum", "array"] + (["object"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(0, 5)}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 100)}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "fox", "x y"], rng.randint(1, 3))}
    if kind == "array":
        return {"type": "array", "items": random_schema(rng, 2), "maxItems": rng.randint(0, 3)}
    names = rng.sample(["a", "b", "city", "n", "ok", "list"], rng.randint(1, 3))
    return {"type": "object", "properties": {n: random_schema(rng, depth + 1) for n in names},
            "required": names, "additionalProperties": False}


def _json_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema,
                                                    "strict": True}}


def test_fifty_random_schemas_every_output_parses_and_validates(client, engine):
    rng = random.Random(0)
    schemas = [random_schema(rng) for _ in range(50)]

    def ask(i):
        return client.chat.completions.create(
            model=engine.model_name, messages=ASK, max_tokens=150, temperature=1.0, seed=i,
            response_format=_json_format(schemas[i]))

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(ask, range(50)))
    for schema, out in zip(schemas, outs):
        choice = out.choices[0]
        assert choice.finish_reason == "stop", (schema, choice.message.content)
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_json_object_and_a_plain_row_share_a_batch(client, engine):
    """A grammar-masked row decodes in one batch with a plain one, and the plain row's text
    is what it is alone. The plain reply is long and starts first: the tiny random model's
    JSON may close after two tokens ("{}"), so a constrained row that came first could end
    before the plain one was read in (the old order: a CI flake)."""
    log = EventLog(engine)
    plain_alone = client.chat.completions.create(model=engine.model_name, messages=ASK,
                                                 max_tokens=120, temperature=0)
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(client.chat.completions.create, model=engine.model_name,
                            messages=ASK, max_tokens=120, temperature=0)
        _wait_for_a_decode_step(log, after=len(log.steps()))
        constrained = pool.submit(client.chat.completions.create, model=engine.model_name,
                                  messages=ASK, max_tokens=60, temperature=0,
                                  response_format={"type": "json_object"})
        constrained, plain = constrained.result(), plain.result()
    log.close()
    text = constrained.choices[0].message.content
    assert text.startswith("{")
    if constrained.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    assert plain.choices[0].message.content == plain_alone.choices[0].message.content
    assert any(s.batch_size == 2 for s in log.steps())


def _wait_for_a_decode_step(log: EventLog, after: int, timeout: float = 30) -> None:
    """Until a decode step after the first `after` steps: the request in flight decodes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(s.batch_size >= 1 for s in log.steps()[after:]):
            return
        time.sleep(0.001)
    raise AssertionError("the plain request never decoded")


def test_bad_response_formats_are_400(client, engine):
    for fmt in ({"type": "xml"}, {"type": "json_schema"},
                {"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=engine.model_name, messages=ASK,
                                           response_format=fmt)
        assert info.value.body["param"] == "response_format"


def _log_softmax64(logits) -> np.ndarray:
    x = np.array(logits, dtype=np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_chat_logprobs_match_a_float64_reference(client, engine):
    out = client.chat.completions.create(model=engine.model_name, messages=ASK, max_tokens=8,
                                         temperature=0.9, seed=4, logprobs=True,
                                         top_logprobs=3)
    content = out.choices[0].logprobs.content
    text = out.choices[0].message.content
    assert bytes(b for e in content for b in e.bytes).decode("utf-8", "replace") == text
    prompt = engine.tokenizer.encode_prompt(ASK)
    # the completion's ids, from the same seeded request run directly
    direct = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0.9,
                                                      seed=4))[0]
    ids = list(direct.token_ids)
    ref = _log_softmax64(engine.logits(prompt + ids))[len(prompt) - 1:]
    ids = [t for t in ids if t not in engine.tokenizer.eos_token_ids]
    assert len(content) == len(ids)
    for i, (entry, t) in enumerate(zip(content, ids)):
        assert entry.token == engine.tokenizer.decode([t])
        assert abs(entry.logprob - ref[i, t]) < 1e-4
        order = np.argsort(-ref[i])[:3]
        assert [e.logprob for e in entry.top_logprobs] == pytest.approx(ref[i, order], abs=1e-4)


def test_streamed_logprobs_cover_every_token(client, engine):
    kw = dict(model=engine.model_name, messages=ASK, max_tokens=10, temperature=0,
              logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**kw).choices[0].logprobs.content
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == \
        [(e.token, round(e.logprob, 5)) for e in whole]


def test_completion_logprobs(client, engine):
    out = client.completions.create(model=engine.model_name, prompt="hello world",
                                    max_tokens=5, temperature=0, logprobs=2)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) > 0
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset == [sum(map(len, lp.tokens[:i])) for i in range(len(lp.tokens))]
    chunks = list(client.completions.create(model=engine.model_name, prompt="hello world",
                                            max_tokens=5, temperature=0, logprobs=2,
                                            stream=True))
    offsets = [o for c in chunks if c.choices[0].logprobs
               for o in c.choices[0].logprobs.text_offset]
    assert offsets == lp.text_offset


def test_logit_bias_forces_and_bans(client, engine):
    tok = engine.tokenizer
    target = tok.encode(" fox")[0]
    forced = client.chat.completions.create(model=engine.model_name, messages=ASK,
                                            max_tokens=4, temperature=0,
                                            logit_bias={str(target): 100})
    assert forced.choices[0].message.content == tok.decode([target] * 4)
    first = int(np.argmax(np.array(engine.logits(tok.encode_prompt(ASK)))[-1]))
    banned = client.chat.completions.create(model=engine.model_name, messages=ASK,
                                            max_tokens=1, temperature=0, logprobs=True,
                                            logit_bias={str(first): -100})
    tokens = [e.token for e in banned.choices[0].logprobs.content]
    assert tokens[:1] != [tok.decode([first])]
    assert engine.generate([tok.encode_prompt(ASK)], SamplingParams(max_tokens=1))[0] \
        .token_ids == (first,)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=engine.model_name, messages=ASK,
                                       logit_bias={"10000000": 5})
    assert info.value.body["param"] == "logit_bias"
