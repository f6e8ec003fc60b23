"""One request's life inside the engine: pure Python, no mlx."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from engine.events import RequestStats


class Status(enum.Enum):
    WAITING = "waiting"      # queued, or preempted and waiting to be recomputed
    RUNNING = "running"      # has pages; prefilling or decoding
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request_id: int
    prompt_ids: list[int]
    status: Status = Status.WAITING
    output_ids: list[int] = field(default_factory=list)
    # Tokens sampled on the device but not read back yet: (ids array, row). The
    # next decode step feeds them to the model without waiting for the host.
    pending: list = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    slot: int | None = None
    num_computed: int = 0            # tokens whose K/V (and state) are in the cache
    prefill_target: int = 0          # tokens to read before decoding (set on admission)
    num_cached: int = 0              # prompt tokens taken from a cached earlier turn
    finish_reason: str | None = None
    num_preemptions: int = 0
    num_failed_steps: int = 0        # engine steps that raised while it was in them
    t_submit: float = field(default_factory=time.perf_counter)
    t_first_token: float | None = None
    t_prefill_start: float | None = None
    t_finish: float | None = None

    @property
    def all_ids(self) -> list[int]:
        """Every token known on the host (pending ones are not)."""
        return self.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids) + len(self.pending)

    @property
    def num_to_prefill(self) -> int:
        """Tokens still to read before decoding (after preemption: prompt and outputs)."""
        return max(self.prefill_target - self.num_computed, 0)

    @property
    def is_prefilling(self) -> bool:
        return self.status is Status.RUNNING and self.num_to_prefill > 0

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED


def request_stats(seq: Sequence) -> RequestStats:
    """The numbers a FinishedEvent reports for a finished sequence."""
    n = len(seq.output_ids)
    first = seq.t_first_token
    ttft = (first - seq.t_submit) if first else 0.0
    decode_s = (seq.t_finish - first) if first else 0.0
    prefill_s = (first - seq.t_prefill_start) if first and seq.t_prefill_start else 0.0
    return RequestStats(
        prompt_tokens=len(seq.prompt_ids), generated_tokens=n, ttft_s=ttft,
        decode_tok_s=(n - 1) / decode_s if n > 1 and decode_s > 0 else 0.0,
        prefill_tok_s=(len(seq.prompt_ids) - seq.num_cached) / prefill_s
        if prefill_s > 0 else 0.0,
        num_preemptions=seq.num_preemptions, cached_tokens=seq.num_cached)
