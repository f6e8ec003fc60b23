"""Per-request sampling settings: defaults and validation come from engine/settings_spec.py."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.settings_spec import SAMPLING, engine_default, sampling_values

# Per-request fields no conversation setting declares (the API's): not in SETTINGS.
REQUEST_ONLY_FIELDS = ("stop", "logit_bias", "logprobs", "constraint", "token_log")
MAX_TOP_LOGPROBS = 20


class TokenConstraint(Protocol):
    """A grammar that decides, token by token, which ids may come next (one request's,
    stateful). Called on the engine thread only (engine/server/grammar.py has one)."""

    def fill_mask(self, bitmask_row) -> None:
        """Write the allowed ids of the next token as bits into an int32 numpy row of
        ceil(V / 32) words (bit i % 32 of word i // 32: id i allowed)."""

    def accept(self, token_id: int) -> None:
        """The token sampled (known on the host)."""

    def rollback(self, num_tokens: int) -> None:
        """Forget the last num_tokens accepted ones."""


@dataclass(frozen=True)
class SamplingParams:
    # One field per spec entry of kind "sampling" (a test keeps the two in step).
    max_tokens: int = engine_default("max_tokens")
    temperature: float = engine_default("temperature")      # 0 = greedy
    top_p: float = engine_default("top_p")
    top_k: int = engine_default("top_k")                    # 0 = off
    min_p: float = engine_default("min_p")
    repetition_penalty: float = engine_default("repetition_penalty")
    seed: int | None = engine_default("seed")
    stop: tuple[str, ...] = field(default_factory=tuple)
    # (token id, bias added to its logit) pairs, as OpenAI's logit_bias (-100 bans an id).
    logit_bias: tuple[tuple[int, float], ...] = ()
    # None: no logprobs; k >= 0: each sampled token's logprob and the k likeliest.
    logprobs: int | None = None
    # Request-owned state, never compared: a grammar's token mask, and where the
    # sampler appends each token's logprobs (a list; TokenLogprob items).
    constraint: TokenConstraint | None = field(default=None, compare=False, repr=False)
    token_log: list | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        for s in SAMPLING:
            object.__setattr__(self, s.name, s.check(getattr(self, s.name)))
        object.__setattr__(self, "stop", _check_stop(self.stop))
        object.__setattr__(self, "logit_bias", _check_bias(self.logit_bias))
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must be 0..{MAX_TOP_LOGPROBS} top entries; "
                             f"got {self.logprobs}")
        if self.logprobs is not None and self.token_log is None:
            object.__setattr__(self, "token_log", [])

    @classmethod
    def from_settings(cls, values: Mapping[str, Any], **overrides) -> SamplingParams:
        """From a conversation's settings mapping (other kinds, like the system prompt,
        are ignored)."""
        return cls(**{**sampling_values(values), **overrides})

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class TokenLogprob:
    """One sampled token's log-probability under the model (before any filter or bias),
    and the `top` likeliest ids as (id, logprob), likeliest first."""
    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def _check_bias(bias) -> tuple[tuple[int, float], ...]:
    pairs = tuple(bias.items()) if isinstance(bias, Mapping) else tuple(bias)
    out = []
    for pair in pairs:
        token, value = pair
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise ValueError(f"logit_bias keys must be token ids >= 0; got {token!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not -100 <= value <= 100:
            raise ValueError(f"logit_bias values must be numbers in -100..100; got {value!r}")
        out.append((int(token), float(value)))
    return tuple(out)


def _check_stop(stop) -> tuple[str, ...]:
    """A tuple of non-empty strings (a lone string is one stop string)."""
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (tuple, list)):
        raise TypeError(f"stop must be a list of non-empty strings; got {stop!r}")
    for s in stop:
        if not isinstance(s, str):
            raise TypeError(f"stop must be a list of non-empty strings; got {s!r} "
                            f"({type(s).__name__}) in it")
        if not s:
            raise ValueError("stop strings must be non-empty (an empty one would stop "
                             "every reply at once)")
    return tuple(stop)

