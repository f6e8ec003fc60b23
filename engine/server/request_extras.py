"""The request fields beyond plain sampling: tools, response_format, logprobs, logit_bias
(read and checked here; api_request.py builds the request around them)."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.sampling_params import MAX_TOP_LOGPROBS
from engine.server import grammar
from engine.server.api_error import bad_request
from engine.server.field_reader import FieldReader
from engine.server.tools import ToolRequest, read_tools

_MAX_BIAS_ENTRIES = 1024


@dataclass(frozen=True)
class Extras:
    tools: ToolRequest | None = None
    grammar: str | None = None              # llguidance's grammar (response_format), or None
    grammar_param: str | None = None        # the field it came from, for its 400s
    logprobs: int | None = None             # None: off; k: the sampled token's and k top
    logit_bias: tuple[tuple[int, float], ...] = ()
    # chat_template_kwargs (vLLM's name): variables for the template, e.g. enable_thinking
    template_vars: dict = field(default_factory=dict)


def read_extras(r: FieldReader, chat: bool) -> Extras:
    tools = read_tools(r.body) if chat else None
    rule, param = _response_format(r)
    if tools is not None and tools.forced:
        if rule is not None:
            raise bad_request("'response_format' cannot be combined with a 'tool_choice' "
                              "that forces a call; send one of them.", "response_format")
        _need_llguidance("tool_choice")
        param = "tool_choice"     # the grammar is built in prepare.py: its format is the template's
    return Extras(tools=tools, grammar=rule, grammar_param=param,
                  logprobs=_logprobs(r, chat), logit_bias=_logit_bias(r),
                  template_vars=_template_vars(r) if chat else {})


def _template_vars(r: FieldReader) -> dict:
    values = r.obj("chat_template_kwargs")
    reserved = {"messages", "tools", "add_generation_prompt", "documents"}
    for key in values:
        if key in reserved or key.startswith("_") or key.endswith("_token"):
            raise bad_request(f"'chat_template_kwargs' cannot set {key!r}.",
                              "chat_template_kwargs")
    return dict(values)


def _response_format(r: FieldReader) -> tuple[str | None, str | None]:
    fmt = r.obj("response_format")
    kind = fmt.get("type", "text")
    if kind == "text":
        return None, None
    if kind == "json_object":
        _need_llguidance("response_format")
        return grammar.json_schema_grammar({"type": "object"}), "response_format"
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad_request("'response_format.json_schema.schema' must be a JSON schema "
                              "object.", "response_format")
        _need_llguidance("response_format")
        try:
            return grammar.json_schema_grammar(schema), "response_format"
        except ValueError as e:
            raise bad_request(f"'response_format' schema is not usable: {e}",
                              "response_format") from e
    raise bad_request(f"'response_format' type {kind!r} is not supported; use 'text', "
                      "'json_object' or 'json_schema'.", "response_format")


def _need_llguidance(param: str) -> None:
    if not grammar.available():
        raise bad_request(f"'{param}' needs constrained decoding, and the grammar engine "
                          "(llguidance) is not installed: pip install llguidance.", param)


def _logprobs(r: FieldReader, chat: bool) -> int | None:
    if not chat:                                  # completions: logprobs is the top count
        k = r.integer("logprobs", None, lo=0)
        if k is not None and k > 5:
            raise bad_request("'logprobs' must be 0..5 for completions.", "logprobs")
        return k
    on = r.boolean("logprobs", False)
    top = r.integer("top_logprobs", None, lo=0)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise bad_request(f"'top_logprobs' must be 0..{MAX_TOP_LOGPROBS}.", "top_logprobs")
    if top and not on:
        raise bad_request("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    return (top or 0) if on else None


def _logit_bias(r: FieldReader) -> tuple[tuple[int, float], ...]:
    bias = r.obj("logit_bias")
    if len(bias) > _MAX_BIAS_ENTRIES:
        raise bad_request(f"'logit_bias' has more than {_MAX_BIAS_ENTRIES} entries.",
                          "logit_bias")
    out = []
    for key, value in bias.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise bad_request(f"'logit_bias' keys must be token ids; got {key!r}.", "logit_bias")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not -100 <= value <= 100:
            raise bad_request(f"'logit_bias' values must be numbers in -100..100; got "
                              f"{value!r} for {key}.", "logit_bias")
        out.append((int(key), float(value)))
    return tuple(out)
