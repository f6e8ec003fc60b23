"""A trace recorded from the real engine: two prompts decoded together."""
from __future__ import annotations

import json

import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.telemetry import TraceRecorder, validate_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    folder = write_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")
    path = tmp_path_factory.mktemp("trace") / "run.json"
    recorder = TraceRecorder()
    with Engine.load(folder, EngineConfig(num_pages=64, page_size=4)) as engine:
        engine.add_listener(recorder.on_event)
        recorder.start()
        engine.generate([[1, 2, 3], [4, 5, 6, 7]], SamplingParams(max_tokens=8))
        recorder.stop()
        recorder.save(path)
    return json.loads(path.read_text())


def test_trace_is_valid(trace):
    assert validate_trace(trace) == []
    assert trace["displayTimeUnit"] == "ms"


def test_two_prompts_decode_together_in_batches_of_2(trace):
    steps = [e for e in trace["traceEvents"] if e.get("name") == "decode_step"]
    assert steps and max(e["args"]["batch_size"] for e in steps) == 2
    prefills = [e for e in trace["traceEvents"] if e.get("name") == "prefill_chunk"]
    read = {rid for e in prefills for rid in e["args"]["request_ids"]}
    assert len(read) == 2                 # both prompts (read together, in one forward)


def test_request_spans_contain_their_first_token(trace):
    events = trace["traceEvents"]
    spans = {}
    for e in events:
        if e.get("cat") == "request" and e["ph"] in ("b", "e"):
            spans.setdefault(e["id"], {})[e["ph"]] = e["ts"]
    assert len(spans) == 2
    firsts = {e["id"]: e["ts"] for e in events
              if e.get("cat") == "request" and e["ph"] == "n"}
    for rid, span in spans.items():
        assert span["b"] <= firsts[rid] <= span["e"]
