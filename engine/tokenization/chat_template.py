"""Render a model's own Jinja2 chat template the way HF transformers does.

Models are trained on the exact bytes their template produces, so we mirror
transformers' environment (sandbox, trim_blocks, lstrip_blocks, its `tojson`,
`raise_exception`, `strftime_now`, `namespace`) instead of approximating it.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import InvalidRequestError, ModelLoadError

# Older names for a message's reasoning; templates read `reasoning_content`.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own tojson HTML-escapes '<' and '&'; HF's does not, and templates rely on that.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Namespace(jinja2.utils.Namespace):
    """`namespace()` that refuses dunder names, as transformers' does."""

    def __init__(*args, **kwargs):  # same signature trick as jinja's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} not allowed")


def _make_env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _Namespace
    return env


_ENV = _make_env()


@lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    """Compile once per template string; a bad template is a user-fixable load error."""
    # HF's `{% generation %}` tag only marks assistant spans for training masks;
    # it renders its body unchanged, so drop the tags rather than add an extension.
    source = source.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    source = source.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
    try:
        return _ENV.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ModelLoadError(
            f"The model's chat template is not valid Jinja2 ({e}). "
            "Fix chat_template in tokenizer_config.json or pass raw token ids.") from e


def _alias_reasoning(messages: list[dict]) -> list[dict]:
    # Same aliasing as transformers: fill `reasoning_content` (and `thinking`) from any older name.
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise TypeError(f"chat messages must be dicts, got {m!r}")
        m = dict(m)
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def render_chat_template(source: str, messages: list[dict], *, add_generation_prompt: bool = True,
                         special_tokens: dict[str, str | None] | None = None,
                         tools: list[dict] | None = None, **extra: Any) -> str:
    """Render `messages` with the template `source`.

    `special_tokens` supplies bos_token/eos_token/... variables, as HF passes them.
    `extra` reaches the template as variables (e.g. enable_thinking=False).
    """
    template = compile_template(source)
    variables = {k: v for k, v in (special_tokens or {}).items() if v is not None}
    variables.update(extra)
    try:
        return template.render(messages=_alias_reasoning(messages), tools=tools, documents=None,
                               add_generation_prompt=add_generation_prompt, **variables)
    except jinja2.exceptions.TemplateError as e:
        raise InvalidRequestError(
            f"The model's chat template refused these messages: {e}. "
            "Check the message roles and order, or pass raw token ids.") from e
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        # The template assumed a shape these messages lack (e.g. list content, no content).
        raise InvalidRequestError(
            f"The model's chat template cannot render these messages ({type(e).__name__}: "
            f"{e}). Send each message's content as one string.") from e
