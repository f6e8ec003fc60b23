"""Engine.set_reading_pace: the reading-pace floor (EngineConfig.min_stream_tok_s) of a
running engine changes from the next step on, without a reload.

No timing: the floors are extreme, so the plan does not depend on the measured rates.
1e6 tok/s (a 1 us step) cannot hold beside any decode step, so a prompt read beside a
stream is read in the degraded mode; 0 turns the floor off (a whole chunk, never
degraded)."""
from __future__ import annotations

import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.errors import InvalidRequestError
from engine.events import StepEvent

CFG = EngineConfig(page_size=16, num_pages=600, prefill_chunk=64, max_context=4200,
                   min_stream_tok_s=0.0)


def _reading_steps(steps: list, request_id: int) -> list[StepEvent]:
    return [s for s in steps if isinstance(s, StepEvent) and request_id in s.prefill_request_ids]


def test_the_reading_pace_floor_changes_while_a_conversation_streams(tmp_path):
    with Engine.load(write_tiny_llama(tmp_path / "llama"), CFG) as engine:
        steps: list = []
        engine.add_listener(steps.append)
        # A long stream; after its 4th token both rates are measured (its prompt read
        # alone, then decode-only steps), so the floor alone decides the next plans.
        stream = engine.submit(list(range(1, 11)), SamplingParams(max_tokens=4000))
        for _, _ in zip(range(4), stream):
            pass
        engine.set_reading_pace(1e6)
        assert engine.config.min_stream_tok_s == 1e6
        floored = engine.submit(list(range(100, 140)), SamplingParams(max_tokens=1))
        floored.result()
        engine.set_reading_pace(0)
        free = engine.submit(list(range(200, 240)), SamplingParams(max_tokens=1))
        free.result()
        stream.cancel()
        assert stream.result().finish_reason == "cancelled"  # it streamed all along

        first = _reading_steps(steps, floored.request_id)[0]
        assert first.kind == "mixed" and first.degraded      # the new floor held at once
        # each step says which of the budget's rules chose its chunk
        assert first.chunk_reason.startswith(("degraded", "smallest")), first.chunk_reason
        read = _reading_steps(steps, free.request_id)
        assert len(read) == 1 and read[0].kind == "mixed"    # floor off: one whole chunk
        assert not read[0].degraded and read[0].prefill_tokens == 40
        assert read[0].chunk_reason == "no floor"
        assert all(not e.chunk_reason for e in steps if getattr(e, "kind", "") == "prefill")


def test_a_bad_reading_pace_is_refused_and_changes_nothing(tmp_path):
    with Engine.load(write_tiny_llama(tmp_path / "llama"), CFG) as engine:
        for bad in (-1.0, float("nan"), float("inf"), "fast", None):
            with pytest.raises(InvalidRequestError, match="min_stream_tok_s"):
                engine.set_reading_pace(bad)
        assert engine.config.min_stream_tok_s == 0.0
