"""An API request's body, checked and turned into what the engine takes.

Unknown fields are ignored (as vLLM and llama.cpp do, so clients that send
extras keep working); fields we know but cannot honour are refused with a 400
that says so, rather than silently giving different output.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.sampling_params import SamplingParams
from engine.server.api_error import bad_request
from engine.server.field_reader import FieldReader
from engine.server.request_extras import Extras, read_extras
from engine.server.tools import history_fields

Prompt = str | list[dict] | list[int]
_ROLES = {"system", "developer", "user", "assistant", "tool"}
_SAMPLER_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}


@dataclass(frozen=True)
class ApiRequest:
    kind: str                  # "chat" (messages, rendered by the chat template) or "text"
    model: str | None          # None: the loaded model
    prompt: Prompt             # messages for chat; text or token ids for completions
    sampling: SamplingParams
    max_tokens_given: bool     # False: generate up to the context's end, as OpenAI does
    stream: bool
    include_usage: bool        # stream_options.include_usage: a last chunk with usage
    extras: Extras = Extras()  # tools, response_format, logprobs, logit_bias

    def sampling_for(self, max_context: int) -> SamplingParams:
        if self.max_tokens_given:
            return self.sampling
        return dataclasses.replace(self.sampling, max_tokens=max_context)


def parse_chat(body: object) -> ApiRequest:
    r = FieldReader(body)
    messages = r.body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", "messages")
    _refuse_unsupported(r, chat=True)
    return _request(r, "chat", [_message(m, i) for i, m in enumerate(messages)])


def parse_completion(body: object) -> ApiRequest:
    r = FieldReader(body)
    _refuse_unsupported(r, chat=False)
    return _request(r, "text", _completion_prompt(r.body.get("prompt")))


def _request(r: FieldReader, kind: str, prompt: Prompt) -> ApiRequest:
    sampling, given = _sampling(r)
    extras = read_extras(r, kind == "chat")
    sampling = dataclasses.replace(sampling, logit_bias=extras.logit_bias,
                                   logprobs=extras.logprobs)
    options = r.obj("stream_options")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad_request("'stream_options.include_usage' must be true or false.",
                          "stream_options")
    return ApiRequest(kind=kind, model=r.string("model", None), prompt=prompt,
                      sampling=sampling, max_tokens_given=given,
                      stream=r.boolean("stream", False), include_usage=include_usage,
                      extras=extras)


def _sampling(r: FieldReader) -> tuple[SamplingParams, bool]:
    max_tokens = r.integer("max_completion_tokens", None, lo=1)
    if max_tokens is None:
        max_tokens = r.integer("max_tokens", None, lo=1)
    top_k = r.integer("top_k", 0, lo=-1)        # -1 means "off" in vLLM and llama.cpp
    fields = {
        "max_tokens": max_tokens or 1,
        "temperature": r.number("temperature", 1.0, 0.0, 2.0),
        "top_p": r.number("top_p", 1.0, 0.0, 1.0),
        "top_k": max(top_k, 0),
        "min_p": r.number("min_p", 0.0, 0.0, 1.0),
        "repetition_penalty": r.number("repetition_penalty", 1.0, 0.0, 10.0),
        "seed": r.integer("seed", None),
        "stop": r.stop(),
    }
    for name in ("presence_penalty", "frequency_penalty"):
        value = r.number(name, 0.0, -2.0, 2.0)
        if name in _SAMPLER_FIELDS:
            fields[name] = value
        elif value != 0.0:
            raise bad_request(f"'{name}' is not supported by this engine's sampler; use "
                              "'repetition_penalty' (e.g. 1.1) instead.", name)
    try:
        return SamplingParams(**fields), max_tokens is not None
    except ValueError as e:            # out of range: the message starts with the field
        field = str(e).split(" ", 1)[0]
        raise bad_request(f"Invalid sampling settings: {e}.",
                          field if field in fields else None) from e


def _refuse_unsupported(r: FieldReader, chat: bool) -> None:
    if r.integer("n", 1) != 1:
        raise bad_request("Only 'n': 1 is supported; send several requests instead "
                          "(they decode together in one batch).", "n")
    if r.integer("best_of", 1) != 1:
        raise bad_request("'best_of' is not supported; send 'n': 1 (or several requests).",
                          "best_of")
    if not chat and r.boolean("echo", False):
        raise bad_request("'echo' is not supported.", "echo")
    if not chat and r.string("suffix", None):
        raise bad_request("'suffix' (fill in the middle) is not supported.", "suffix")


def _message(m: object, i: int) -> dict:
    param = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad_request(f"{param} must be an object with 'role' and 'content'.", param)
    role = m.get("role")
    if role not in _ROLES:
        raise bad_request(f"{param}.role must be one of {sorted(_ROLES)}; got {role!r}.", param)
    out = {"role": "system" if role == "developer" else role,
           "content": _content(m.get("content"), param), **history_fields(m, param)}
    name = m.get("name")
    if isinstance(name, str):
        out["name"] = name
    return out


def _content(content: object, param: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{param}.content must be a string or a list of text parts.", param)
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" \
                or not isinstance(part.get("text"), str):
            raise bad_request(f"{param}.content: only text parts ({{'type': 'text', "
                              "'text': ...}) are supported.", param)
        texts.append(part["text"])
    return "".join(texts)


def _completion_prompt(prompt: object) -> str | list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]                     # a batch of one
    if isinstance(prompt, str) and prompt:
        return prompt
    if isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        return list(prompt)
    raise bad_request("'prompt' must be a non-empty string or a non-empty list of token "
                      "ids (one prompt per request; several requests batch together).",
                      "prompt")
