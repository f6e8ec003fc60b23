"""Time to first token counts from Engine.submit(), not from the moment the engine
thread takes the request between two steps (a long step used to hide there)."""
from __future__ import annotations

import threading
import time

import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.events import StepEvent, SubmittedEvent


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = write_tiny_llama(tmp_path_factory.mktemp("tiny"))
    with Engine.load(folder, EngineConfig(num_pages=64, page_size=4, prefill_chunk=8,
                                          max_num_seqs=4, max_context=128)) as e:
        yield e


def test_a_request_sent_during_a_step_counts_from_its_submit(engine):
    busy, release = threading.Event(), threading.Event()
    submitted = {}

    def listener(ev):     # holds the engine thread inside its first step's event
        if isinstance(ev, StepEvent) and not busy.is_set():
            busy.set()
            release.wait(10)
        elif isinstance(ev, SubmittedEvent):
            submitted[ev.request_id] = ev.t

    engine.add_listener(listener)
    try:
        first = engine.submit([5, 6, 7], SamplingParams(max_tokens=4))
        assert busy.wait(10)
        t_call = time.perf_counter()
        second = engine.submit([8, 9, 10], SamplingParams(max_tokens=2))
        t_returned = time.perf_counter()
        time.sleep(0.05)                 # the engine thread is still held
        t_released = time.perf_counter()
        release.set()
        stats = second.result().stats
        first.result()
    finally:
        release.set()
        engine.remove_listener(listener)
    t_sub = submitted[second.request_id]
    assert t_call <= t_sub <= t_returned < t_released
    # its first token came after the release; counted from the submit, the wait shows
    assert stats.ttft_s >= t_released - t_returned
