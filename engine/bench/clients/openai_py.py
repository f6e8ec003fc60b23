"""The official `openai` Python SDK against the server (see checks.py)."""
from __future__ import annotations

import openai
from checks import (
    ASK,
    CITY,
    HISTORY,
    MODEL,
    TOOLS_MODEL,
    TOOLS_URL,
    URL,
    WEATHER,
    Checks,
    check_args,
    check_city,
    expect,
)
from pydantic import BaseModel, Field

c = openai.OpenAI(base_url=URL, api_key="none", max_retries=0)
t = openai.OpenAI(base_url=TOOLS_URL or URL, api_key="none", max_retries=0)
checks = Checks("openai (Python)", "openai")
REQUIRED = dict(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)


class City(BaseModel):          # bounded, as CITY: a 135M model may loop inside a string
    city: str = Field(max_length=20)
    population: int = Field(ge=0, le=99999999)


def models():
    ids = [m.id for m in c.models.list().data]
    expect(ids == [MODEL], ids)
    return c.models.retrieve(MODEL).id


def chat():
    r = c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=16, temperature=0)
    expect(r.choices[0].message.content and r.usage.prompt_tokens > 0, r)
    return r.choices[0].message.content


def stream_usage():
    chunks = list(c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=16,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    usage = chunks[-1].usage
    expect(text and usage and usage.completion_tokens > 0 and not chunks[-1].choices, chunks[-1])
    return f"{len(chunks)} chunks, usage {usage.total_tokens}"


def json_schema():
    r = c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=100, temperature=0,
                                  response_format={"type": "json_schema", "json_schema": {
                                      "name": "city", "schema": CITY, "strict": True}})
    return check_city(r.choices[0].message.content)


def parse_pydantic():
    r = c.chat.completions.parse(model=MODEL, messages=ASK, max_tokens=100, temperature=0,
                                 response_format=City)
    parsed = r.choices[0].message.parsed
    expect(isinstance(parsed, City), r)
    return parsed.model_dump_json()


def tools_refused():
    try:
        c.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], max_tokens=8)
    except openai.BadRequestError as e:
        expect(e.param == "tools", e.body)
        return "400, param tools (the built-in's template has no tool format)"
    raise AssertionError("tools were accepted by a template without a tool format")


def tool_history():
    r = c.chat.completions.create(model=MODEL, messages=HISTORY, max_tokens=16, temperature=0)
    return r.choices[0].message.content


def tool_call():
    r = t.chat.completions.create(model=TOOLS_MODEL, messages=ASK, max_tokens=200,
                                  temperature=0, **REQUIRED)
    choice = r.choices[0]
    expect(choice.finish_reason == "tool_calls", choice)
    (call,) = choice.message.tool_calls
    expect(call.function.name == "get_weather", call)
    return check_args(call.function.arguments)


def tool_stream():
    with t.chat.completions.stream(model=TOOLS_MODEL, messages=ASK, max_tokens=200,
                                   temperature=0, **REQUIRED) as s:
        final = s.get_final_completion().choices[0]
    expect(final.finish_reason == "tool_calls", final)
    return check_args(final.message.tool_calls[0].function.arguments)


def tool_round_trip():
    r = t.chat.completions.create(model=TOOLS_MODEL, messages=ASK, max_tokens=200,
                                  temperature=0, **REQUIRED)
    call = r.choices[0].message.tool_calls[0]
    messages = [*ASK, r.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'}]
    again = t.chat.completions.create(model=TOOLS_MODEL, messages=messages, max_tokens=16,
                                      temperature=0, tools=[WEATHER], tool_choice="none")
    expect(again.choices[0].finish_reason in ("stop", "length"), again)
    return f"call {call.id} answered, then {again.usage.prompt_tokens} prompt tokens"


def responses():
    r = c.responses.create(model=MODEL, input="What is the capital of France?",
                           max_output_tokens=16, temperature=0)
    expect(r.output_text and r.status in ("completed", "incomplete"), r)
    return r.output_text


def responses_stream():
    with c.responses.stream(model=MODEL, input="Say hello.", max_output_tokens=64) as s:
        events = list(s)
        kinds = [e.type for e in events]
        if kinds[-1] == "response.completed":
            final = s.get_final_response()
        else:     # cut at max_output_tokens: OpenAI's event, which get_final_response refuses
            expect(kinds[-1] == "response.incomplete", kinds)
            final = events[-1].response
            expect(final.incomplete_details.reason == "max_output_tokens", final)
    expect(kinds[0] == "response.created" and final.output_text, kinds)
    return f"{len(kinds)} events, last {kinds[-1]}"


def responses_json():
    r = c.responses.create(model=MODEL, input="Name a city.", max_output_tokens=100,
                           temperature=0, text={"format": {"type": "json_schema",
                                                           "name": "city", "schema": CITY,
                                                           "strict": True}})
    return check_city(r.output_text)


def responses_tool():
    tool = {"type": "function", **WEATHER["function"]}
    r = t.responses.create(model=TOOLS_MODEL, input="Weather in Paris?", tools=[tool],
                           tool_choice="required", max_output_tokens=200, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    expect(calls and calls[0].name == "get_weather", r.output)
    return check_args(calls[0].arguments)


def logprobs():
    r = c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, temperature=0,
                                  logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    expect(len(content) == r.usage.completion_tokens and len(content[0].top_logprobs) == 2,
           r.choices[0].logprobs)
    expect(content[0].logprob <= 0 and content[0].token == content[0].top_logprobs[0].token,
           content[0])
    return f"{len(content)} tokens, first {content[0].token!r} {content[0].logprob:.3f}"


def n_refused():
    try:
        c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, n=2)
    except openai.BadRequestError as e:
        expect(e.param == "n", e.body)
        return "400, param n"
    raise AssertionError("n=2 accepted")


def raw_headers():
    raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=ASK, max_tokens=4)
    r = raw.parse()
    expect(raw.headers.get("x-request-id") and r.system_fingerprint, raw.headers)
    return f"x-request-id {raw.headers['x-request-id']}, {r.system_fingerprint}"


def legacy_completion():
    r = c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8,
                             temperature=0)
    expect(r.choices[0].text and r.usage.completion_tokens > 0, r)
    return r.choices[0].text


def responses_parse():
    r = c.responses.parse(model=MODEL, input="Name a city.", max_output_tokens=100,
                          temperature=0, text_format=City)
    expect(isinstance(r.output_parsed, City), r)
    return r.output_parsed.model_dump_json()


def responses_round_trip():
    tool = {"type": "function", **WEATHER["function"]}
    r = t.responses.create(model=TOOLS_MODEL, input="Weather in Paris?", tools=[tool],
                           tool_choice="required", max_output_tokens=200, temperature=0)
    call = next(o for o in r.output if o.type == "function_call")
    items = [{"role": "user", "content": "Weather in Paris?"}, *r.output,
             {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 21}'}]
    again = t.responses.create(model=TOOLS_MODEL, input=items, tools=[tool], tool_choice="none",
                               max_output_tokens=16, temperature=0)
    expect(again.status in ("completed", "incomplete") and again.output_text is not None, again)
    return f"call {call.call_id} answered"


for name, fn, tools in [("models.list/retrieve", models, False), ("chat", chat, False),
                        ("stream + include_usage", stream_usage, False),
                        ("json_schema", json_schema, False),
                        ("chat.completions.parse (pydantic)", parse_pydantic, False),
                        ("tools on the built-in: 400", tools_refused, False),
                        ("history with tool_calls + tool", tool_history, False),
                        ("tool_choice required", tool_call, True),
                        ("tool call streamed (stream helper)", tool_stream, True),
                        ("tool_calls round trip", tool_round_trip, True),
                        ("responses.create", responses, False),
                        ("responses.stream", responses_stream, False),
                        ("responses json_schema", responses_json, False),
                        ("responses function_call", responses_tool, True),
                        ("logprobs + top_logprobs", logprobs, False),
                        ("n=2: 400", n_refused, False),
                        ("x-request-id, system_fingerprint", raw_headers, False),
                        ("completions (legacy)", legacy_completion, False),
                        ("responses.parse (pydantic)", responses_parse, False),
                        ("responses function_call_output round trip",
                         responses_round_trip, True)]:
    checks.run(name, fn, needs_tools=tools)
