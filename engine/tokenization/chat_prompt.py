"""A chat prompt with tools: messages (tool calls and results included) plus the tool
definitions the model's own chat template renders.

    engine.submit(ChatPrompt(messages, tools=[{"type": "function", "function": {...}}]))

What a template can render is read from its source (the variables and names it
uses), not guessed from the model's name: a template that never reads `tools`
cannot show the model a tool (the API answers 400), and one that never reads a
message's `tool_calls` would drop them, so those histories are folded into plain
text in the Hermes / Qwen form (`<tool_call>{...}</tool_call>` in the assistant's
text, `<tool_response>...</tool_response>` as a user turn) instead of vanishing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes

from engine.errors import InvalidRequestError


@dataclass(frozen=True)
class ChatPrompt:
    messages: list[dict]
    tools: list[dict] | None = None          # OpenAI's [{"type": "function", "function": ...}]
    template_vars: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TemplateSupport:
    tools: bool          # reads `tools`
    tool_calls: bool     # reads a message's `tool_calls`
    tool_role: bool      # names the "tool" role
    xml_calls: bool = False  # writes calls as `<function=name><parameter=...>` (Qwen3.5)

    @property
    def call_format(self) -> str:
        """How the template writes a call inside <tool_call>: "xml" or "json"."""
        return "xml" if self.xml_calls else "json"


@lru_cache(maxsize=16)
def template_support(source: str | None) -> TemplateSupport:
    if not source:
        return TemplateSupport(False, False, False)
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    try:
        ast = env.parse(source.replace("{% generation %}", "").replace(
            "{% endgeneration %}", ""))
    except jinja2.TemplateSyntaxError:
        return TemplateSupport(False, False, False)
    names = jinja2.meta.find_undeclared_variables(ast)
    attrs = {n.attr for n in ast.find_all(jinja2.nodes.Getattr)}
    attrs |= {n.arg.value for n in ast.find_all(jinja2.nodes.Getitem)
              if isinstance(n.arg, jinja2.nodes.Const) and isinstance(n.arg.value, str)}
    consts = {n.value for n in ast.find_all(jinja2.nodes.Const) if isinstance(n.value, str)}
    texts = consts | {n.data for n in ast.find_all(jinja2.nodes.TemplateData)}
    return TemplateSupport(tools="tools" in names, tool_calls="tool_calls" in attrs,
                           tool_role="tool" in consts,
                           xml_calls=any("<function=" in t for t in texts))


def prepare_messages(prompt: ChatPrompt, source: str | None) -> tuple[list[dict], list | None]:
    """(messages the template can render without losing anything, tools to pass)."""
    support = template_support(source)
    if prompt.tools and not support.tools:
        raise InvalidRequestError(
            "This model's chat template has no tool format (it never reads `tools`), so "
            "tool definitions cannot be shown to it; send the request without tools.")
    messages = [_fold(m, support) for m in prompt.messages]
    return _merge_tool_turns(messages, support), (prompt.tools or None)


def _fold(m: dict, support: TemplateSupport) -> dict:
    if m.get("tool_calls") and not support.tool_calls:
        calls = "\n".join(tool_call_text(c) for c in m["tool_calls"])
        text = m.get("content") or ""
        m = {k: v for k, v in m.items() if k != "tool_calls"}
        m["content"] = f"{text}\n{calls}" if text else calls
    if m.get("role") == "tool" and not support.tool_role:
        m = {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n"
                                        "</tool_response>", "_tool": True}
    return m


def _merge_tool_turns(messages: list[dict], support: TemplateSupport) -> list[dict]:
    """Consecutive folded tool results become one user turn (as Qwen's template does)."""
    out: list[dict] = []
    for m in messages:
        if m.pop("_tool", False) and out and out[-1].get("_merged"):
            out[-1]["content"] += "\n" + m["content"]
            continue
        if m.get("role") == "user" and "<tool_response>" in (m.get("content") or "") \
                and not support.tool_role:
            m = {**m, "_merged": True}
        out.append(m)
    return [{k: v for k, v in m.items() if k != "_merged"} for m in out]


def tool_call_text(call: dict) -> str:
    """One call in the Hermes / Qwen text form."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    body = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"
