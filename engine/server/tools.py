"""Function calling in a chat request: `tools`, `tool_choice`, `parallel_tool_calls`,
and tool calls / results in the history (OpenAI's shapes, checked; a 400 names the field).

tool_choice "none" sends no tools to the template and reads no calls back; "auto" shows
them and reads any calls the model writes; "required" and a named function also
constrain decoding to a call (engine/server/grammar.py), so the reply is one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from engine.server.api_error import bad_request

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


@dataclass(frozen=True)
class ToolRequest:
    tools: tuple[dict, ...]          # OpenAI's {"type": "function", "function": {...}}
    choice: str                      # "auto" | "none" | "required" | "function"
    name: str | None = None          # the function tool_choice names
    parallel: bool = True

    @property
    def rendered(self) -> list[dict] | None:
        """What the chat template gets: nothing when tool_choice is "none"."""
        return list(self.tools) if self.tools and self.choice != "none" else None

    @property
    def reads_calls(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def forced(self) -> list[dict]:
        """The functions decoding is constrained to (empty: not constrained)."""
        if self.choice == "required":
            return [t["function"] for t in self.tools]
        if self.choice == "function":
            return [t["function"] for t in self.tools if t["function"]["name"] == self.name]
        return []


def read_tools(body: dict) -> ToolRequest | None:
    for legacy in ("functions", "function_call"):
        if body.get(legacy) is not None:
            raise bad_request(f"'{legacy}' (the legacy function-calling API) is not "
                              "supported; send 'tools' and 'tool_choice' instead.", legacy)
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None and choice in (None, "none"):
        return None
    if not isinstance(tools, list) or (not tools and choice not in (None, "none", "auto")):
        raise bad_request("'tools' must be a list of {'type': 'function', 'function': "
                          "{'name': ..., 'parameters': {...}}}.", "tools")
    checked = tuple(_tool(t, i) for i, t in enumerate(tools))
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad_request("'parallel_tool_calls' must be true or false.", "parallel_tool_calls")
    kind, name = _choice(choice, {t["function"]["name"] for t in checked})
    return ToolRequest(checked, kind, name, parallel)


def _tool(t: object, i: int) -> dict:
    param = f"tools[{i}]"
    if not isinstance(t, dict) or t.get("type", "function") != "function" \
            or not isinstance(t.get("function"), dict):
        raise bad_request(f"{param} must be {{'type': 'function', 'function': {{...}}}}.", param)
    fn = t["function"]
    name = fn.get("name")
    if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS:
        raise bad_request(f"{param}.function.name must be a name of letters, digits, "
                          f"'_', '-' or '.'; got {name!r}.", param)
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        raise bad_request(f"{param}.function.parameters must be a JSON schema object.", param)
    desc = fn.get("description")
    if desc is not None and not isinstance(desc, str):
        raise bad_request(f"{param}.function.description must be a string.", param)
    out = {"name": name, **({"description": desc} if desc is not None else {}),
           "parameters": params}
    if isinstance(fn.get("strict"), bool):
        out["strict"] = fn["strict"]
    return {"type": "function", "function": out}


def _choice(choice: object, names: set[str]) -> tuple[str, str | None]:
    if choice is None:
        return "auto", None
    if choice in ("auto", "none", "required"):
        return choice, None
    if isinstance(choice, dict) and choice.get("type") == "function" \
            and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if name not in names:
            raise bad_request(f"'tool_choice' names {name!r}, which is not in 'tools' "
                              f"({sorted(names)}).", "tool_choice")
        return "function", name
    raise bad_request("'tool_choice' must be 'auto', 'none', 'required' or "
                      "{'type': 'function', 'function': {'name': ...}}.", "tool_choice")


def history_fields(m: dict, param: str) -> dict:
    """The tool fields of one history message, in the shape chat templates read:
    an assistant's `tool_calls` (arguments as an object, as transformers passes them)
    and a tool result's `tool_call_id` / `name`."""
    out = {}
    if m.get("role") == "assistant" and m.get("tool_calls") is not None:
        calls = m["tool_calls"]
        if not isinstance(calls, list):
            raise bad_request(f"{param}.tool_calls must be a list.", param)
        out["tool_calls"] = [_history_call(c, f"{param}.tool_calls[{j}]")
                             for j, c in enumerate(calls)]
    if m.get("role") == "tool":
        call_id = m.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise bad_request(f"{param}.tool_call_id must be a string.", param)
        if call_id is not None:
            out["tool_call_id"] = call_id
    return out


def _history_call(c: object, param: str) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad_request(f"{param} must be {{'id': ..., 'type': 'function', 'function': "
                          "{'name': ..., 'arguments': '<JSON text>'}}.", param)
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            pass                      # kept as the text the client sent
    elif not isinstance(args, dict):
        raise bad_request(f"{param}.function.arguments must be a JSON string.", param)
    out = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
    if isinstance(c.get("id"), str):
        out["id"] = c["id"]
    return out

