"""langchain-openai's ChatOpenAI against the server (see checks.py)."""
from __future__ import annotations

import json

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
from langchain_core.messages import ToolMessage
from langchain_openai import ChatOpenAI

checks = Checks("langchain-openai", "langchain-openai")
QUESTION = ASK[0]["content"]


def llm(max_tokens=16, **kw):
    return ChatOpenAI(model=MODEL, base_url=URL, api_key="none", temperature=0,
                      max_tokens=max_tokens, max_retries=0, **kw)


def tools_llm():
    return ChatOpenAI(model=TOOLS_MODEL, base_url=TOOLS_URL, api_key="none", temperature=0,
                      max_tokens=200, max_retries=0).bind_tools(
        [WEATHER], tool_choice="required", parallel_tool_calls=False)


def text_of(message) -> str:
    text = message.text
    return text() if callable(text) else text      # a method before langchain-core 1.0


def invoke():
    r = llm().invoke(QUESTION)
    expect(text_of(r) and r.usage_metadata["input_tokens"] > 0, r)
    return text_of(r)


def stream_usage():
    chunks = list(llm(stream_usage=True).stream(QUESTION))
    whole = sum(chunks[1:], chunks[0])
    expect(text_of(whole) and whole.usage_metadata["output_tokens"] > 0, whole)
    return f"{len(chunks)} chunks, usage {whole.usage_metadata['total_tokens']}"


def structured():
    out = llm(100).with_structured_output(CITY | {"title": "City"}, method="json_schema",
                                          strict=True).invoke(QUESTION)
    return check_city(json.dumps(out))


def tools_refused():
    try:
        llm().bind_tools([WEATHER]).invoke(QUESTION)
    except openai.BadRequestError as e:
        expect(e.param == "tools", e.body)
        return "400, param tools"
    raise AssertionError("tools were accepted by a template without a tool format")


def tool_history():
    return text_of(llm().invoke(HISTORY))


def tool_call():
    r = tools_llm().invoke(QUESTION)
    (call,) = r.tool_calls
    expect(call["name"] == "get_weather", r)
    return check_args(call["args"])


def tool_stream():
    chunks = list(tools_llm().stream(QUESTION))
    whole = sum(chunks[1:], chunks[0])
    (call,) = whole.tool_calls
    expect(call["name"] == "get_weather", whole)
    return check_args(call["args"])


def tool_round_trip():
    ai = tools_llm().invoke(QUESTION)
    call = ai.tool_calls[0]
    history = [("human", QUESTION), ai,
               ToolMessage(content='{"temp_c": 21}', tool_call_id=call["id"])]
    again = ChatOpenAI(model=TOOLS_MODEL, base_url=TOOLS_URL, api_key="none", temperature=0,
                       max_tokens=16, max_retries=0).bind_tools(
        [WEATHER], tool_choice="none").invoke(history)
    expect(isinstance(text_of(again), str) and not again.tool_calls, again)
    return f"call {call['id']} answered"


def structured_tool():
    """method="function_calling": a forced call of a tool named after the schema."""
    out = ChatOpenAI(model=TOOLS_MODEL, base_url=TOOLS_URL, api_key="none", temperature=0,
                     max_tokens=200, max_retries=0).with_structured_output(
        WEATHER["function"]["parameters"] | {"title": "get_weather"},
        method="function_calling").invoke(QUESTION)
    return check_args(json.dumps(out))


def responses_stream():
    chunks = list(llm(use_responses_api=True).stream(QUESTION))
    whole = sum(chunks[1:], chunks[0])
    expect(text_of(whole), whole)
    return f"{len(chunks)} chunks: {text_of(whole)}"


def responses_api():
    r = llm(use_responses_api=True).invoke(QUESTION)
    expect(text_of(r), r)
    return text_of(r)


for name, fn, tools in [("invoke", invoke, False), ("stream + stream_usage", stream_usage, False),
                        ("with_structured_output json_schema", structured, False),
                        ("tools on the built-in: 400", tools_refused, False),
                        ("history with tool_calls + tool", tool_history, False),
                        ("bind_tools tool_choice required", tool_call, True),
                        ("tool call streamed (chunks summed)", tool_stream, True),
                        ("tool_calls round trip (ToolMessage)", tool_round_trip, True),
                        ("use_responses_api=True", responses_api, False),
                        ("use_responses_api stream", responses_stream, False),
                        ("with_structured_output function_calling", structured_tool, True)]:
    checks.run(name, fn, needs_tools=tools)
