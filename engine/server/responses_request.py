"""OpenAI's Responses API request (POST /v1/responses) read as the chat request it is.

`input` (text, or items: messages, function_call, function_call_output), `instructions`,
function `tools`, `tool_choice`, `text.format` (json_schema / json_object),
`max_output_tokens`, sampling fields. Nothing is stored on the server, so
`previous_response_id` is refused: send the whole conversation in `input`.
"""
from __future__ import annotations

from engine.server.api_error import bad_request

_TEXT_PARTS = ("input_text", "output_text", "text")


def to_chat_body(body: object) -> dict:
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    if body.get("previous_response_id") is not None:
        raise bad_request("'previous_response_id' is not supported (this server stores no "
                          "responses); send the whole conversation in 'input'.",
                          "previous_response_id")
    messages = []
    if body.get("instructions") is not None:
        if not isinstance(body["instructions"], str):
            raise bad_request("'instructions' must be a string.", "instructions")
        messages.append({"role": "system", "content": body["instructions"]})
    messages += _input(body.get("input"))
    chat = {"messages": messages, "model": body.get("model"), "stream": body.get("stream")}
    for ours, theirs in (("max_tokens", "max_output_tokens"), ("temperature", "temperature"),
                         ("top_p", "top_p"), ("parallel_tool_calls", "parallel_tool_calls"),
                         ("top_logprobs", "top_logprobs")):
        if body.get(theirs) is not None:
            chat[ours] = body[theirs]
    if body.get("tools"):
        chat["tools"] = [_tool(t, i) for i, t in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            "name": fmt.get("name", "output"), "schema": fmt.get("schema")}}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    return chat


def _input(items: object) -> list[dict]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad_request("'input' must be text or a non-empty list of items.", "input")
    out: list[dict] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object.", "input")
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role"), "content": _content(item.get("content"),
                                                                      where)})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function", "function": {
                "name": item.get("name"), "arguments": item.get("arguments", "{}")}}
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": output if isinstance(output, str)
                        else _content(output, where)})
        elif kind == "reasoning":
            continue
        else:
            raise bad_request(f"{where}: item type {kind!r} is not supported (message, "
                              "function_call, function_call_output).", "input")
    return out


def _content(content: object, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be text or a list of text parts.", "input")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS \
                or not isinstance(part.get("text"), str):
            raise bad_request(f"{where}.content: only text parts (input_text, output_text) "
                              "are supported.", "input")
        texts.append(part["text"])
    return "".join(texts)


def _tool(t: object, i: int) -> dict:
    if not isinstance(t, dict) or t.get("type") != "function":
        kind = t.get("type") if isinstance(t, dict) else None
        raise bad_request(f"tools[{i}]: only function tools are supported; got {kind!r}.",
                          f"tools[{i}]")
    fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
    return {"type": "function", "function": fn}


def _tool_choice(choice: object):
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice
