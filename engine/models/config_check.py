"""Check a config.json's values against a family's ModelArgs before building the model.

config.json files are edited by hand, converted by scripts and truncated by
downloads; a missing or mistyped key must not surface as a bare KeyError
(``'num_attention_heads'``) or a TypeError deep in a layer. Every ModelArgs
field that the config names is checked for its declared type first, then the
family's ``from_config`` runs, then the built args are checked again (defaults
and derived values included). Each error names the file and the key.
"""
from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, Field, fields
from typing import Any

from engine.errors import ModelLoadError


def model_args(cls: type, config: dict, where: str):
    """`cls.from_config(config)`, with every fault a ModelLoadError naming `where` and the key."""
    hints = typing.get_type_hints(cls)
    text = config.get("text_config")
    for f in fields(cls):                      # keys that are not ModelArgs fields are ignored
        for source in (config, text) if isinstance(text, dict) else (config,):
            if source.get(f.name) is not None:
                _check(f, hints[f.name], source[f.name], where)
    try:
        args = cls.from_config(config)
    except KeyError as e:
        raise ModelLoadError(f"{where}: the required key {e.args[0]!r} is missing; "
                             "re-download the model or add it.") from None
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
        raise ModelLoadError(f"{where}: {e}; fix the file or re-download the model.") from None
    for f in fields(cls):
        _check(f, hints[f.name], getattr(args, f.name), where)
    return args


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _matches(hint: Any, value: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(h, value) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is int:
        return _is_int(value)
    if hint is float:
        return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)
    if hint is bool:
        return isinstance(value, bool)
    if origin is tuple:        # JSON arrays arrive as lists
        inner = typing.get_args(hint)[0]
        return isinstance(value, (list, tuple)) and all(_matches(inner, v) for v in value)
    return isinstance(value, origin or hint)


def _describe(hint: Any) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
             dict: "an object", type(None): "null"}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return f"a list of {_describe(typing.get_args(hint)[0]).removeprefix('a ')}s"
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _check(field: Field, hint: Any, value: Any, where: str) -> None:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if not _matches(hint, value):
        raise ModelLoadError(f"{where}: '{field.name}' must be {_describe(hint)}, got "
                             f"{type(value).__name__} {shown}; fix the file or re-download "
                             "the model.")
    # Sizes without a default (hidden_size, heads, layers, vocab) are divisors and widths.
    required = field.default is MISSING and field.default_factory is MISSING
    if required and _is_int(value) and value < 1:
        raise ModelLoadError(f"{where}: '{field.name}' is {shown}; it must be at least 1.")
