"""Anthropic's Messages API request (POST /v1/messages) read as the chat request it is.

The body is translated into the OpenAI chat body this server already checks
(api_request.parse_chat), so a Messages request takes the same path to the engine:
the same template, tools, sampling and 400s. Blocks: text, tool_use (assistant),
tool_result (user; becomes a `tool` message); images are refused.
"""
from __future__ import annotations

import json

from engine.server.api_error import bad_request

_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def to_chat_body(body: object) -> dict:
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    if body.get("max_tokens") is None:
        raise bad_request("'max_tokens' is required.", "max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", "messages")
    out = [*_system(body.get("system"))]
    for i, m in enumerate(messages):
        out += _message(m, f"messages[{i}]")
    chat = {"messages": out, "max_tokens": body["max_tokens"], "stream": body.get("stream"),
            "model": body.get("model")}
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"),
                         ("top_k", "top_k"), ("stop", "stop_sequences")):
        if body.get(theirs) is not None:
            chat[ours] = body[theirs]
    if body.get("tools"):
        chat["tools"] = [_tool(t, i) for i, t in enumerate(body["tools"])]
    chat.update(_tool_choice(body.get("tool_choice")))
    fmt = body.get("output_format") or (body.get("output_config") or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "output", "schema": fmt.get("schema")}}
    return chat


def _system(system: object) -> list[dict]:
    if system is None:
        return []
    if isinstance(system, list):
        system = "".join(_text_block(b, "system") for b in system)
    if not isinstance(system, str):
        raise bad_request("'system' must be a string or a list of text blocks.", "system")
    return [{"role": "system", "content": system}]


def _message(m: object, param: str) -> list[dict]:
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
        raise bad_request(f"{param} must be {{'role': 'user' | 'assistant', 'content': ...}}.",
                          param)
    content = m.get("content")
    if isinstance(content, str):
        return [{"role": m["role"], "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"{param}.content must be a string or a list of blocks.", param)
    texts, calls, results = [], [], []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"{param}.content[{j}]"
        if kind == "text":
            texts.append(_text_block(block, where))
        elif kind == "tool_use" and m["role"] == "assistant":
            calls.append({"id": block.get("id"), "type": "function", "function": {
                "name": block.get("name"),
                "arguments": json.dumps(block.get("input", {}), ensure_ascii=False)}})
        elif kind == "tool_result" and m["role"] == "user":
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                            "content": _result_text(block.get("content"), where)})
        elif kind in ("thinking", "redacted_thinking"):
            continue                   # earlier reasoning: templates drop it anyway
        else:
            raise bad_request(f"{where}: block type {kind!r} is not supported here (text, "
                              "tool_use from the assistant, tool_result from the user).", param)
    out = list(results)
    if texts or calls or not results:
        msg = {"role": m["role"], "content": "".join(texts)}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _text_block(block: object, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("text"), str):
        raise bad_request(f"{where}: a text block needs 'text'.", where.split(".")[0])
    return block["text"]


def _result_text(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text_block(b, where) for b in content
                       if isinstance(b, dict) and b.get("type") == "text")
    raise bad_request(f"{where}.content must be text or text blocks.", "messages")


def _tool(t: object, i: int) -> dict:
    if not isinstance(t, dict) or not isinstance(t.get("name"), str):
        raise bad_request(f"tools[{i}] must have a 'name' and an 'input_schema'.", f"tools[{i}]")
    fn = {"name": t["name"], "parameters": t.get("input_schema") or {"type": "object"}}
    if isinstance(t.get("description"), str):
        fn["description"] = t["description"]
    return {"type": "function", "function": fn}


def _tool_choice(choice: object) -> dict:
    if choice is None:
        return {}
    if not isinstance(choice, dict) or choice.get("type") not in (*_CHOICE, "tool"):
        raise bad_request("'tool_choice' must be {'type': 'auto' | 'any' | 'tool' | 'none'}.",
                          "tool_choice")
    out = {"parallel_tool_calls": not choice.get("disable_parallel_tool_use", False)}
    if choice["type"] == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        out["tool_choice"] = _CHOICE[choice["type"]]
    return out
