"""Function calling through the official openai client, on a tiny model whose chat
template is Qwen3's (tools rendered by it). A random model does not call tools by itself,
so the calls here are forced (tool_choice required / named: a grammar) or scripted."""
from __future__ import annotations

import json

import openai
import pytest

from engine.server.openai_format import ResponseShape
from engine.server.reply import Reply
from engine.tokenization.chat_prompt import ChatPrompt

pytest.importorskip("llguidance")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 6},
        "days": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {}, "additionalProperties": False}}}
ASK = [{"role": "user", "content": "hello world, the quick brown fox"}]


def _ask(client, **kw):
    return client.chat.completions.create(model=openai.NOT_GIVEN,
                                          messages=kw.pop("messages", ASK),
                                          max_tokens=kw.pop("max_tokens", 80),
                                          temperature=0, **kw)


def test_named_tool_choice_gives_a_valid_call(qclient):
    out = _ask(qclient, tools=[WEATHER, TIME], parallel_tool_calls=False,
               tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert set(args) == {"city", "days"} and 1 <= args["days"] <= 5
    assert call.id.startswith("call_")


def test_required_streams_the_same_call_the_sdk_assembles(qclient):
    kw = dict(tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False,
              seed=3)
    whole = _ask(qclient, **kw).choices[0]
    with qclient.chat.completions.stream(model=openai.NOT_GIVEN, messages=ASK, max_tokens=80,
                                         temperature=0, **kw) as stream:
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in final.message.tool_calls] == \
        [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    assert json.loads(final.message.tool_calls[0].function.arguments) is not None


def test_tool_history_round_trip_and_choice_none(qclient, qwen_engine):
    call = _ask(qclient, tools=[WEATHER], tool_choice="required",
                parallel_tool_calls=False).choices[0].message.tool_calls[0]
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id, "content": "12 C"}]
    out = _ask(qclient, messages=history, tools=[WEATHER], tool_choice="none")
    assert out.choices[0].finish_reason in ("stop", "length")
    assert out.choices[0].message.tool_calls is None
    # the call and its result are in the prompt the model read
    args = json.loads(call.function.arguments)
    rendered = qwen_engine.tokenizer.render_chat(ChatPrompt(
        [*ASK, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": call.function.name,
                                              "arguments": args}}]},
         {"role": "tool", "content": "12 C"}]))
    assert out.usage.prompt_tokens == len(qwen_engine.tokenizer.encode(rendered))
    assert "<tool_response>\n12 C\n</tool_response>" in rendered
    assert json.dumps(args, ensure_ascii=False) in rendered


def test_auto_reads_a_scripted_call_in_the_reply(qwen_engine):
    """The parser on the server's reply path: a model's text with a call in it."""
    text = ('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Bern", "days": 2}}\n</tool_call>')
    reply = Reply(ResponseShape("chat", "m"), qwen_engine.tokenizer, None, read_calls=True)
    whole = reply.whole(text, "stop", None)["choices"][0]
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"] == "Checking."
    assert json.loads(whole["message"]["tool_calls"][0]["function"]["arguments"]) == \
        {"city": "Bern", "days": 2}
    streamed = Reply(ResponseShape("chat", "m"), qwen_engine.tokenizer, None, read_calls=True)
    chunks = [c for i in range(0, len(text), 5) for c in streamed.delta_chunks(text[i:i + 5])]
    chunks += streamed.last_chunks("stop")
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == "Checking."
    calls = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"]
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == \
        {"city": "Bern", "days": 2}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tools_on_a_template_without_them_is_400(client, engine):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=engine.model_name, messages=ASK, tools=[WEATHER])
    assert info.value.body["param"] == "tools"
    out = client.chat.completions.create(model=engine.model_name, messages=ASK, max_tokens=3,
                                         tools=[WEATHER], tool_choice="none")
    assert out.choices[0].message.tool_calls is None


@pytest.mark.parametrize("body,param", [
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0]"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
     "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"messages": [{"role": "assistant", "tool_calls": "no"}]}, "messages[0]"),
])
def test_bad_tool_fields_are_400_naming_them(qclient, body, param):
    with pytest.raises(openai.BadRequestError) as info:
        qclient.chat.completions.create(model=openai.NOT_GIVEN,
                                        messages=body.pop("messages", ASK), extra_body=body)
    assert info.value.body["param"] == param


def test_the_engine_chat_path_takes_a_chat_prompt(qwen_engine):
    """Engine.submit(ChatPrompt) renders tools with the template (the app's path)."""
    from engine import SamplingParams
    prompt = ChatPrompt(ASK, tools=[WEATHER])
    out = qwen_engine.submit(prompt, SamplingParams(max_tokens=2, temperature=0)).result()
    rendered = qwen_engine.tokenizer.render_chat(prompt)
    assert "get_weather" in rendered and out.stats.prompt_tokens == \
        len(qwen_engine.tokenizer.encode(rendered))


def test_a_forced_call_follows_the_templates_xml_format(xml_client):
    """Qwen3.5's templates write calls as <function=..><parameter=..>: a forced call is
    generated in that form (the grammar follows the template) and read back."""
    out = _ask(xml_client, tools=[WEATHER, TIME], parallel_tool_calls=False, max_tokens=300,
               tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = out.choices[0].message.tool_calls
    args = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and set(args) == {"city", "days"}
    assert isinstance(args["city"], str) and len(args["city"]) <= 6 and 1 <= args["days"] <= 5
    assert out.choices[0].finish_reason == "tool_calls"
