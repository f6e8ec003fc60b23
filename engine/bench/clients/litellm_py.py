"""litellm (its OpenAI-compatible provider, `openai/<model>` with `api_base`) against the
server (see checks.py)."""
from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # no download at import

import litellm
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

checks = Checks("litellm", "litellm")
BASE = dict(model=f"openai/{MODEL}", api_base=URL, api_key="none", temperature=0)
TOOLS = dict(model=f"openai/{TOOLS_MODEL}", api_base=TOOLS_URL, api_key="none", temperature=0,
             tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)


def chat():
    r = litellm.completion(messages=ASK, max_tokens=16, **BASE)
    expect(r.choices[0].message.content and r.usage.prompt_tokens > 0, r)
    return r.choices[0].message.content


def stream_usage():
    chunks = list(litellm.completion(messages=ASK, max_tokens=16, stream=True,
                                     stream_options={"include_usage": True}, **BASE))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    usage = next((getattr(ch, "usage", None) for ch in reversed(chunks)
                  if getattr(ch, "usage", None)), None)
    expect(text and usage and usage.completion_tokens > 0, chunks[-1])
    return f"{len(chunks)} chunks, usage {usage.total_tokens}"


def json_schema():
    r = litellm.completion(messages=ASK, max_tokens=100, **BASE, response_format={
        "type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}})
    return check_city(r.choices[0].message.content)


def tools_refused():
    try:
        litellm.completion(messages=ASK, max_tokens=8, tools=[WEATHER], **BASE)
    except litellm.BadRequestError as e:
        expect("tools" in str(e), str(e))
        return "BadRequestError naming tools"
    raise AssertionError("tools were accepted by a template without a tool format")


def tool_history():
    return litellm.completion(messages=HISTORY, max_tokens=16, **BASE).choices[0].message.content


def tool_call():
    r = litellm.completion(messages=ASK, max_tokens=200, **TOOLS)
    expect(r.choices[0].finish_reason == "tool_calls", r.choices[0])
    return check_args(r.choices[0].message.tool_calls[0].function.arguments)


def tool_stream():
    chunks = list(litellm.completion(messages=ASK, max_tokens=200, stream=True, **TOOLS))
    whole = litellm.stream_chunk_builder(chunks, messages=ASK)
    expect(whole.choices[0].finish_reason == "tool_calls", whole.choices[0])
    return check_args(whole.choices[0].message.tool_calls[0].function.arguments)


def tool_round_trip():
    r = litellm.completion(messages=ASK, max_tokens=200, **TOOLS)
    msg = r.choices[0].message
    call = msg.tool_calls[0]
    history = [*ASK, msg.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'}]
    again = litellm.completion(messages=history, max_tokens=16,
                               **{**TOOLS, "tool_choice": "none"})
    expect(again.choices[0].finish_reason in ("stop", "length"), again)
    return f"call {call.id} answered"


def responses():
    r = litellm.responses(input="What is the capital of France?", max_output_tokens=16,
                          **BASE)
    text = "".join(c.text for o in r.output if o.type == "message" for c in o.content
                   if c.type == "output_text")
    expect(text, r)
    return text


def messages():
    r = asyncio.run(litellm.anthropic.messages.acreate(      # it has no sync call
        model=f"anthropic/{MODEL}", api_base=URL.removesuffix("/v1"), api_key="none",
        messages=ASK, max_tokens=16))
    blocks = r["content"] if isinstance(r, dict) else r.content
    text = "".join(b["text"] if isinstance(b, dict) else b.text for b in blocks)
    expect(text, r)
    return text


for name, fn, tools in [("chat", chat, False), ("stream + include_usage", stream_usage, False),
                        ("json_schema", json_schema, False),
                        ("tools on the built-in: 400", tools_refused, False),
                        ("history with tool_calls + tool", tool_history, False),
                        ("tool_choice required", tool_call, True),
                        ("tool call streamed (stream_chunk_builder)", tool_stream, True),
                        ("tool_calls round trip", tool_round_trip, True),
                        ("litellm.responses", responses, False),
                        ("anthropic.messages (/v1/messages)", messages, False)]:
    checks.run(name, fn, needs_tools=tools)
