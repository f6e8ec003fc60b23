"""POST /v1/responses through the official openai client: text, streaming, function calls,
text.format json_schema."""
from __future__ import annotations

import json

import openai
import pytest

pytest.importorskip("llguidance")

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather now",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 6}},
               "required": ["city"], "additionalProperties": False}}
ASK = "hello world, the quick brown fox"


def test_text_whole_streamed_and_chat_agree(client, engine):
    chat = client.chat.completions.create(
        model=engine.model_name, max_tokens=10, temperature=0,
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": ASK}]).choices[0].message.content
    resp = client.responses.create(model=engine.model_name, input=ASK, instructions="be brief",
                                   max_output_tokens=10, temperature=0)
    assert resp.object == "response" and resp.output_text == chat
    assert resp.status in ("completed", "incomplete") and resp.usage.output_tokens > 0
    with client.responses.stream(model=engine.model_name, input=ASK, instructions="be brief",
                                 max_output_tokens=10, temperature=0) as stream:
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    # a reply cut at max_output_tokens ends in response.incomplete, as OpenAI's does
    assert events[-1].type == {"completed": "response.completed",
                               "incomplete": "response.incomplete"}[resp.status]
    assert "".join(deltas) == chat and events[-1].response.output_text == chat
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))


def test_function_call_round_trip(qclient, qwen_engine):
    kw = dict(model=qwen_engine.model_name, input=ASK, tools=[WEATHER], max_output_tokens=80,
              temperature=0, tool_choice={"type": "function", "name": "get_weather"},
              parallel_tool_calls=False)
    resp = qclient.responses.create(**kw)
    (call,) = [o for o in resp.output if o.type == "function_call"]
    assert call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    with qclient.responses.stream(**kw) as stream:
        final = stream.get_final_response()
    (streamed,) = [o for o in final.output if o.type == "function_call"]
    assert streamed.arguments == call.arguments
    again = qclient.responses.create(
        model=qwen_engine.model_name, max_output_tokens=4, tools=[WEATHER], tool_choice="none",
        input=[{"role": "user", "content": ASK},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": "12 C"}])
    assert not [o for o in again.output if o.type == "function_call"]


def test_json_schema_text_format(client, engine):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}},
              "required": ["ok"], "additionalProperties": False}
    resp = client.responses.create(model=engine.model_name, input=ASK, temperature=0,
                                   max_output_tokens=40, text={"format": {
                                       "type": "json_schema", "name": "r", "schema": schema}})
    assert set(json.loads(resp.output_text)) == {"ok"}


def test_refusals_name_the_field(client, engine):
    for kw, param in (({"previous_response_id": "resp_1"}, "previous_response_id"),
                      ({"tools": [{"type": "web_search"}]}, "tools[0]")):
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model=engine.model_name, input=ASK, **kw)
        assert info.value.body["param"] == param
