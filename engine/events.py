"""Events flowing out of the engine thread (plain data; no mlx, no Qt).

Request events go to that request's handle; StepEvent goes to every
step listener (status panel, trace, benchmarks).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenEvent:
    request_id: int
    text: str                  # detokenized delta (may be "" while a UTF-8 char is incomplete)
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class RequestStats:
    prompt_tokens: int
    generated_tokens: int
    ttft_s: float              # Engine.submit() called -> first token on the host
    decode_tok_s: float        # generated tokens after the first / time since the first
    prefill_tok_s: float = 0.0
    num_preemptions: int = 0
    cached_tokens: int = 0     # prompt tokens reused from the conversation's previous turn


@dataclass(frozen=True)
class FinishedEvent:
    request_id: int
    reason: str                # "stop" (EOS or stop string), "length", "cancelled", "error"
    stats: RequestStats
    text: str = ""             # the whole completion
    token_ids: tuple[int, ...] = ()
    # Why, when the reason alone does not say: the error's text for "error"; for a
    # "length" forced by the KV pool (not max_tokens or the context), that note.
    message: str = ""


@dataclass(frozen=True)
class ErrorEvent:
    request_id: int
    message: str


@dataclass(frozen=True)
class StepEvent:
    """One engine step: what ran, how long, and the pool's state after it."""
    step: int
    t_start: float             # time.perf_counter() seconds
    t_end: float
    kind: str                  # "decode", "prefill" or "mixed"
    decode_request_ids: tuple[int, ...] = ()
    prefill_request_ids: tuple[int, ...] = ()  # prompts read together in this step
    prefill_tokens: int = 0                    # their tokens, all together
    batch_size: int = 0        # rows decoded in this step
    kv_pages_used: int = 0
    kv_pages_total: int = 0
    kv_pages_cached: int = 0   # of kv_pages_used, held by finished turns (evicted on demand)
    num_waiting: int = 0
    num_running: int = 0
    # Requests queued after this step: not admitted yet, or preempted and waiting.
    waiting_request_ids: tuple[int, ...] = ()
    # A prompt was read beside the streams in the degraded mode: the reading-pace floor
    # (EngineConfig.min_stream_tok_s) could not hold, the slowdown was bounded instead.
    degraded: bool = False
    # Where the step's time went on the engine thread (0 where not measured): queue_s,
    # building and queuing its forwards and sampling on the device; read_s, reading its
    # tokens back (mostly waiting for the device) and handing them out. On a GPU queue_s
    # can include device time too: MLX's eval blocks while enough work is in flight
    # (docs/ENGINE.md, "What the floor allows").
    queue_s: float = 0.0
    read_s: float = 0.0
    # The engine thread's CPU seconds within queue_s (time.thread_time): near queue_s where
    # the host's own work is the queue; far below it where the thread waited.
    queue_cpu_s: float = 0.0
    # A mixed step: the seconds the prefill budget predicted when it chose the chunk
    # (engine/core/prefill_budget.py); 0 where nothing was predicted.
    predicted_s: float = 0.0
    # Where decode rows ran while a prompt was read or waited: which rule of the prefill
    # budget chose this step's prompt tokens ("floor", "banked", "probe", "calm: banking",
    # "degraded", ...; "capped from N" where the max-gap cap cut it). "" otherwise.
    chunk_reason: str = ""

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


@dataclass(frozen=True)
class LoadProgress:
    fraction: float            # 0..1
    message: str


@dataclass(frozen=True)
class SubmittedEvent:
    """A request entered the engine (broadcast to listeners, e.g. the trace)."""
    request_id: int
    t: float                   # time.perf_counter() seconds
    prompt_tokens: int


@dataclass(frozen=True)
class CacheNoticeEvent:
    """Something the user should know about the prompt cache (e.g. the disk cache
    stopped writing because the disk is full); the engine keeps working."""
    message: str
