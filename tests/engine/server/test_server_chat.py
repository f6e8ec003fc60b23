"""Chat and text completions through the official openai client match the engine's own output."""
from __future__ import annotations

from engine import SamplingParams

MESSAGES = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello world, the quick brown fox"}]


def test_models_lists_the_loaded_model(client, engine):
    assert [m.id for m in client.models.list().data] == [engine.model_name]


def test_chat_non_streaming_equals_engine_output(client, engine):
    direct = engine.generate([MESSAGES], SamplingParams(max_tokens=12))[0]
    out = client.chat.completions.create(model=engine.model_name, messages=MESSAGES,
                                         max_tokens=12, temperature=0)
    choice = out.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == direct.text
    assert choice.finish_reason == {"length": "length", "stop": "stop"}[direct.finish_reason]
    assert out.usage.prompt_tokens == len(engine.tokenizer.encode_prompt(MESSAGES))
    assert out.usage.completion_tokens == len(direct.token_ids)
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def test_chat_streaming_equals_non_streaming(client, engine):
    whole = client.chat.completions.create(model=engine.model_name, messages=MESSAGES,
                                           max_completion_tokens=15, temperature=0)
    chunks = list(client.chat.completions.create(
        model=engine.model_name, messages=MESSAGES, max_completion_tokens=15, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == whole.choices[0].finish_reason and not any(finals[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        whole.usage.completion_tokens


def test_next_turn_reports_cached_prompt_tokens(client, engine):
    first = client.chat.completions.create(model=engine.model_name, messages=MESSAGES,
                                           max_tokens=6, temperature=0)
    turn = [*MESSAGES, {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "the brown fox"}]
    second = client.chat.completions.create(model=engine.model_name, messages=turn,
                                            max_tokens=4, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < second.usage.prompt_tokens


def test_sampling_fields_reach_the_sampler(client, engine):
    def ask(**kw):
        return client.chat.completions.create(model=engine.model_name, messages=MESSAGES,
                                              max_tokens=10, **kw).choices[0].message.content
    seeded = ask(temperature=1.0, top_p=0.9, seed=7, extra_body={"top_k": 20, "min_p": 0.01})
    assert seeded == ask(temperature=1.0, top_p=0.9, seed=7,
                         extra_body={"top_k": 20, "min_p": 0.01})
    direct = engine.generate([MESSAGES], SamplingParams(
        max_tokens=10, temperature=1.0, top_p=0.9, top_k=20, min_p=0.01, seed=7))[0]
    assert seeded == direct.text
    penalised = ask(temperature=0, extra_body={"repetition_penalty": 1.5})
    assert penalised == engine.generate([MESSAGES], SamplingParams(
        max_tokens=10, repetition_penalty=1.5))[0].text


def test_stop_string_cuts_the_reply(client, engine):
    full = client.chat.completions.create(model=engine.model_name, messages=MESSAGES,
                                          max_tokens=16, temperature=0).choices[0]
    assert len(full.message.content) > 4
    stop = full.message.content[2:4]
    cut = client.chat.completions.create(model=engine.model_name, messages=MESSAGES,
                                         max_tokens=16, temperature=0, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and stop not in cut.message.content
    assert full.message.content.startswith(cut.message.content)


def test_text_completion_uses_no_chat_template(client, engine):
    ids = engine.tokenizer.encode("the quick brown")
    direct = engine.generate([ids], SamplingParams(max_tokens=8))[0]
    out = client.completions.create(model=engine.model_name, prompt="the quick brown",
                                    max_tokens=8, temperature=0)
    assert out.choices[0].text == direct.text and out.usage.prompt_tokens == len(ids)
    streamed = client.completions.create(model=engine.model_name, prompt=ids, max_tokens=8,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == direct.text
