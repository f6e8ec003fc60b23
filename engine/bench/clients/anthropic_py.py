"""The official `anthropic` Python SDK against /v1/messages (see checks.py): the API
agents such as Claude Code use against local servers."""
from __future__ import annotations

import anthropic
from checks import ASK, MODEL, TOOLS_MODEL, TOOLS_URL, URL, WEATHER, Checks, check_args, expect

root = URL.removesuffix("/v1")
c = anthropic.Anthropic(base_url=root, api_key="none", max_retries=0)
t = anthropic.Anthropic(base_url=(TOOLS_URL or URL).removesuffix("/v1"), api_key="none",
                        max_retries=0)
checks = Checks("anthropic", "anthropic")
TOOL = {"name": "get_weather", "description": WEATHER["function"]["description"],
        "input_schema": WEATHER["function"]["parameters"]}
ANY = dict(tools=[TOOL], tool_choice={"type": "any", "disable_parallel_tool_use": True})


def create():
    r = c.messages.create(model=MODEL, messages=ASK, max_tokens=16,
                          system="Answer briefly.")
    expect(r.content[0].type == "text" and r.content[0].text and r.usage.input_tokens > 0, r)
    return f"{r.stop_reason}: {r.content[0].text}"


def stream():
    with c.messages.stream(model=MODEL, messages=ASK, max_tokens=16) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    expect(text and final.content[0].text == text and final.usage.output_tokens > 0, final)
    return f"{final.stop_reason}, {final.usage.output_tokens} tokens"


def stop_sequence():
    # "e" comes up in any English reply of 32 tokens: the reply stops there and says so.
    r = c.messages.create(model=MODEL, messages=ASK, max_tokens=32, stop_sequences=["e"])
    expect(r.stop_reason == "stop_sequence" and r.stop_sequence == "e", r)
    expect("e" not in r.content[0].text if r.content else True, r)
    return f"{r.stop_reason} {r.stop_sequence!r} after {r.content[0].text if r.content else ''!r}"


def count_tokens():
    r = c.messages.count_tokens(model=MODEL, messages=ASK, system="Answer briefly.")
    expect(r.input_tokens > 0, r)
    return f"{r.input_tokens} input tokens"


def tool_use():
    r = t.messages.create(model=TOOLS_MODEL, messages=ASK, max_tokens=200, **ANY)
    uses = [b for b in r.content if b.type == "tool_use"]
    expect(r.stop_reason == "tool_use" and uses and uses[0].name == "get_weather", r)
    return check_args(uses[0].input)


def tool_use_stream():
    with t.messages.stream(model=TOOLS_MODEL, messages=ASK, max_tokens=200, **ANY) as s:
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    expect(final.stop_reason == "tool_use" and uses, final)
    return check_args(uses[0].input)


def tool_round_trip():
    r = t.messages.create(model=TOOLS_MODEL, messages=ASK, max_tokens=200, **ANY)
    use = next(b for b in r.content if b.type == "tool_use")
    history = [*ASK, {"role": "assistant", "content": [b.model_dump() for b in r.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                             "content": '{"temp_c": 21}'}]}]
    again = t.messages.create(model=TOOLS_MODEL, messages=history, max_tokens=16,
                              tools=[TOOL], tool_choice={"type": "none"})
    expect(again.stop_reason in ("end_turn", "max_tokens"), again)
    return f"tool_use {use.id} answered"


for name, fn, tools in [("messages.create", create, False), ("messages.stream", stream, False),
                        ("stop_sequences", stop_sequence, False),
                        ("messages.count_tokens", count_tokens, False),
                        ("tool_choice any: tool_use", tool_use, True),
                        ("tool_use streamed (input_json_delta)", tool_use_stream, True),
                        ("tool_result round trip", tool_round_trip, True)]:
    checks.run(name, fn, needs_tools=tools)
