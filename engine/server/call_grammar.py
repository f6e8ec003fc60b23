"""Grammars (llguidance Lark) for a forced tool call, in the format the model's template
teaches it, so tool_choice "required" / a named function yields a call the parser reads.

- "json" (Qwen2.5, Qwen3, Hermes): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
  the arguments following the function's `parameters` schema.
- "xml" (Qwen3.5/3.6, Qwen3-Coder: the template writes `<function=`):
  `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>`,
  one block per property in schema order (required ones always, others optional);
  string values raw (as the template writes them; `enum`, `minLength` and `maxLength`
  kept), other values JSON under their own schema.
"""
from __future__ import annotations

import json

_NO_SPACE = {"whitespace_flexible": False}


def call_grammar(functions: list[dict], parallel: bool, style: str = "json",
                 thinking: bool = False) -> str:
    """thinking: the prompt ends inside an open `<think>` block (Qwen3.5 by default), so
    the model may reason freely up to `</think>` before its call."""
    calls = [_xml_call(f, i) if style == "xml" else _json_call(f, i)
             for i, f in enumerate(functions)]
    rules = [rule for call in calls for rule in call[1]]
    names = " | ".join(call[0] for call in calls)
    more = ' ("\\n" call)*' if parallel else ""
    head = ['start: think "\\n\\n" calls', r"think[lazy]: /(?s:.*)<\/think>/"] \
        if thinking else ["start: calls"]
    return "\n".join([*head, f"calls: call{more}", f"call: {names}", *rules]) + "\n"


def _json_call(fn: dict, i: int) -> tuple[str, list[str]]:
    schema = {"type": "object", "properties": {
        "name": {"const": fn["name"]},
        "arguments": fn.get("parameters") or {"type": "object"}},
        "required": ["name", "arguments"], "additionalProperties": False,
        "x-guidance": _NO_SPACE}
    body = json.dumps(schema, ensure_ascii=False)
    return f"call{i}", [f'call{i}: "<tool_call>\\n" args{i} "\\n</tool_call>"',
                        f"args{i}: %json {body}"]


def _xml_call(fn: dict, i: int) -> tuple[str, list[str]]:
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or ())
    parts, rules = [], []
    for j, (name, schema) in enumerate(props.items()):
        rule = f"p{i}_{j}"
        rules.append(f'{rule}: "<parameter={name}>\\n" {_value(schema, rule, rules)} '
                     f'"\\n</parameter>\\n"')
        parts.append(rule if name in required else f"{rule}?")
    head = json.dumps(f"<tool_call>\n<function={fn['name']}>\n")
    body = " ".join(parts)
    return f"call{i}", [f'call{i}: {head} {body} "</function>\\n</tool_call>"', *rules]


def _value(schema: dict, rule: str, rules: list[str]) -> str:
    """The value's symbol; adds its rule to `rules`."""
    if schema.get("type") == "string" and "enum" not in schema:
        lo, hi = int(schema.get("minLength", 0)), schema.get("maxLength")
        count = f"{{{lo},{int(hi)}}}" if hi is not None else (f"{{{lo},}}" if lo else "*")
        rules.append(f"{rule}_v: /[^<\\x00-\\x1f]{count}/")   # one line, no tags
    elif "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        rules.append(f"{rule}_v: " + " | ".join(json.dumps(v) for v in schema["enum"]))
    else:
        rules.append(f"{rule}_v: %json {json.dumps({**schema, 'x-guidance': _NO_SPACE})}")
    return f"{rule}_v"
