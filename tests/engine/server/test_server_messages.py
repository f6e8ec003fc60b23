"""POST /v1/messages through the official `anthropic` client: text, streaming, tools."""
from __future__ import annotations

import json

import pytest
from server_harness import post_raw

anthropic = pytest.importorskip("anthropic")
pytest.importorskip("llguidance")

ASK = [{"role": "user", "content": "hello world, the quick brown fox"}]
WEATHER = {"name": "get_weather", "description": "The weather now", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 6}},
    "required": ["city"], "additionalProperties": False}}


def _client(server, key="none"):
    return anthropic.Anthropic(base_url=server.url[:-len("/v1")], api_key=key, max_retries=0,
                               timeout=60)


def test_text_whole_and_streamed_agree(server, engine, client):
    a = _client(server)
    msg = a.messages.create(model="claude-any", max_tokens=12, messages=ASK, extra_body={"temperature": 0},
                            system="be brief")
    openai_text = client.chat.completions.create(
        model=engine.model_name, max_tokens=12, extra_body={"temperature": 0},
        messages=[{"role": "system", "content": "be brief"}, *ASK]).choices[0].message.content
    assert msg.type == "message" and msg.role == "assistant"
    assert "".join(b.text for b in msg.content) == openai_text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.output_tokens > 0
    with a.messages.stream(model="x", max_tokens=12, messages=ASK, extra_body={"temperature": 0},
                           system="be brief") as stream:
        streamed = stream.get_final_message()
    assert "".join(b.text for b in streamed.content) == openai_text
    assert streamed.stop_reason == msg.stop_reason


def test_stop_sequence_is_named(server, engine):
    a = _client(server)
    free = a.messages.create(model="x", max_tokens=12, messages=ASK, extra_body={"temperature": 0})
    words = "".join(b.text for b in free.content)
    if len(words) < 4:
        pytest.skip("the tiny model's reply is too short to cut")
    stop = words[2:4]
    cut = a.messages.create(model="x", max_tokens=12, messages=ASK, extra_body={"temperature": 0},
                            stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert "".join(b.text for b in cut.content) == words[:words.index(stop)]


def test_forced_tool_use_whole_and_streamed(qserver):
    a = _client(qserver)
    kw = dict(model="x", max_tokens=80, messages=ASK, extra_body={"temperature": 0}, tools=[WEATHER],
              tool_choice={"type": "tool", "name": "get_weather",
                           "disable_parallel_tool_use": True})
    msg = a.messages.create(**kw)
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason == "tool_use" and use.name == "get_weather"
    assert set(use.input) == {"city"} and use.id.startswith("toolu_")
    with a.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert streamed.input == use.input and final.stop_reason == "tool_use"
    # the result goes back as a tool_result block
    history = [*ASK, {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                             "content": "12 C"}]}]
    again = a.messages.create(model="x", max_tokens=5, messages=history, tools=[WEATHER],
                              tool_choice={"type": "auto"})
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens > \
        msg.usage.input_tokens + msg.usage.cache_read_input_tokens


def test_errors_are_anthropic_shaped(server):
    a = _client(server)
    with pytest.raises(anthropic.BadRequestError) as info:
        a.messages.create(model="x", max_tokens=5,
                          messages=[{"role": "user", "content": [{"type": "image",
                                                                  "source": {}}]}])
    body = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        a.messages.create(model="x", max_tokens=5, messages=ASK, tools=[WEATHER])


def test_x_api_key_is_accepted(serve, engine):
    from engine.server import EngineHolder
    server = serve(EngineHolder(engine=engine, loading=False), api_key="sekrit")
    assert _client(server, "sekrit").messages.create(model="x", max_tokens=2, messages=ASK)
    with pytest.raises(anthropic.AuthenticationError):
        _client(server, "wrong").messages.create(model="x", max_tokens=2, messages=ASK)


def test_count_tokens_is_the_prompt_the_messages_request_reads(server, engine):
    # anthropic's messages.count_tokens (agents size their context with it): the same
    # rendering as POST /v1/messages, so the same count as /tokenize on that chat.
    a = _client(server)
    counted = a.messages.count_tokens(model="claude-any", messages=ASK, system="be brief")
    chat = [{"role": "system", "content": "be brief"}, *ASK]
    status, body = post_raw(server.url[:-len("/v1")], "/tokenize",
                            json.dumps({"messages": chat}).encode())
    assert status == 200 and counted.input_tokens == body["count"] > 0
    with pytest.raises(anthropic.BadRequestError) as e:
        a.messages.count_tokens(model="x", messages=[])
    assert e.value.body["type"] == "error" and "messages" in e.value.body["error"]["message"]
