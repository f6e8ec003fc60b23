"""Every per-conversation setting, declared once (plain data: no mlx, no Qt).

SamplingParams takes its defaults and validation from SETTINGS, the CLI builds
its options from it (engine/terminal/sampling_args.py), the app builds its dialog fields
from it and stores a conversation's settings as one JSON mapping keyed by
`Setting.name`, so adding a setting here needs no other declaration and no
schema change.

`default` is the engine's (SamplingParams(), the CLI); `chat_default` is what a
new conversation in the app starts with (sampled chat, a system prompt).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

SEED_LIMIT = 2 ** 64     # seeds are rejected outside [0, 2**64), never silently reduced


@dataclass(frozen=True)
class Setting:
    name: str                      # SamplingParams field, CLI --name, storage key
    type: type                     # int | float | str
    default: Any
    chat_default: Any
    label: str
    help: str
    kind: Literal["sampling", "conversation"] = "sampling"
    low: float | None = None       # None = unbounded
    high: float | None = None
    low_open: bool = False         # low itself is not allowed
    high_open: bool = False
    optional: bool = False         # None allowed (seed: None = random)
    step: float = 1                # dialog spin step
    ui_high: float | None = None   # dialog maximum where `high` is unbounded
    short: str = ""                # label in a chat's subtitle; "" = not shown

    def range_text(self) -> str:
        if self.type is str:
            return "text"
        lo = "-inf" if self.low is None else _num(self.low)
        hi = "inf" if self.high is None else _num(self.high)
        text = f"{'(' if self.low_open or self.low is None else '['}{lo}, {hi}"
        text += ")" if self.high_open or self.high is None else "]"
        kind = "an integer" if self.type is int else "a number"
        return f"{kind} in {text}" + (" or None" if self.optional else "")

    def check(self, value: Any) -> Any:
        """`value` as this setting's type, or ValueError/TypeError saying what is allowed."""
        if value is None and self.optional:
            return None
        value = self._coerce(value)
        if self.type is not str and not self._in_range(value):
            raise ValueError(f"{self.name} must be {self.range_text()}; got {value!r}")
        return value

    def _coerce(self, value: Any) -> Any:
        bad = TypeError(f"{self.name} must be {self.range_text()}; got {value!r} "
                        f"({type(value).__name__})")
        if self.type is str:
            if not isinstance(value, str):
                raise bad
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        if self.type is int:
            if isinstance(value, float) and not value.is_integer():
                raise bad            # max_tokens=2.5: no silent rounding
            return int(value)
        return float(value)

    def _in_range(self, v: float) -> bool:
        if isinstance(v, float) and not math.isfinite(v):
            return False             # NaN compares false everywhere: reject it by name
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        return self.high is None or (v < self.high if self.high_open else v <= self.high)


def _num(x: float) -> str:
    if x == SEED_LIMIT:
        return "2**64"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


SETTINGS: tuple[Setting, ...] = (
    Setting("system_prompt", str, "", "You are a helpful assistant.", "System prompt",
            "instructions placed before the conversation", kind="conversation"),
    Setting("temperature", float, 0.0, 0.7, "Temperature",
            "randomness of sampling; 0 = greedy (always the likeliest token)",
            low=0.0, step=0.05, ui_high=2.0, short="temp"),
    Setting("top_p", float, 1.0, 0.95, "Top-p",
            "sample from the smallest set of tokens whose probabilities add up to this; 1 = off",
            low=0.0, high=1.0, low_open=True, step=0.01, short="top-p"),
    Setting("top_k", int, 0, 0, "Top-k",
            "sample from this many likeliest tokens; 0 = off", low=0, ui_high=1000),
    Setting("min_p", float, 0.0, 0.0, "Min-p",
            "drop tokens less likely than this fraction of the likeliest; 0 = off",
            low=0.0, high=1.0, high_open=True, step=0.01),
    Setting("repetition_penalty", float, 1.0, 1.0, "Repetition penalty",
            "divide the odds of tokens already in the conversation by this; 1 = off",
            low=0.0, low_open=True, step=0.05, ui_high=3.0),
    Setting("max_tokens", int, 512, 1024, "Max tokens",
            "most tokens generated for one reply", low=1, high=1_048_576, step=64,
            short="max tokens"),
    Setting("seed", int, None, None, "Seed",
            "random seed for reproducible sampling; unset = a fresh random seed",
            low=0, high=SEED_LIMIT, high_open=True, optional=True),
)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
SAMPLING: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.kind == "sampling")


def engine_default(name: str) -> Any:
    return BY_NAME[name].default


def chat_defaults() -> dict[str, Any]:
    """A new conversation's settings in the app."""
    return {s.name: s.chat_default for s in SETTINGS}


def check_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """Validated copy of `values`; unknown names or a bad value raise ValueError/TypeError."""
    unknown = set(values) - set(BY_NAME)
    if unknown:
        raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")
    return {k: BY_NAME[k].check(v) for k, v in values.items()}


def settings_or_defaults(values: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every setting, from stored `values` where present and valid, else the chat default
    (stored data may predate a setting, or come from a newer version)."""
    out = chat_defaults()
    for name, value in (values or {}).items():
        if name in BY_NAME:
            try:
                out[name] = BY_NAME[name].check(value)
            except (TypeError, ValueError):
                pass
    return out


def sampling_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling settings of a conversation's `values` (what SamplingParams takes)."""
    return {s.name: values[s.name] for s in SAMPLING if s.name in values}


def settings_summary(values: Mapping[str, Any]) -> str:
    """One line for a chat's subtitle: 'temp 0.7 · top-p 0.95 · max tokens 1024'."""
    return " · ".join(f"{s.short} {values[s.name]:g}" for s in SETTINGS
                      if s.short and values.get(s.name) is not None)
