"""Trace files are valid Chrome trace JSON at every moment, and the validator has teeth."""
import copy
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from telemetry_trace_scenario import FakeClock, token, two_requests

from engine.events import SubmittedEvent
from engine.telemetry import TraceRecorder, validate_trace

REPO = Path(__file__).resolve().parents[3]


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_saved_file_parses_and_validates(tmp_path):
    clock = FakeClock()
    rec = TraceRecorder(tmp_path / "t.json", clock=clock)
    rec.start()
    two_requests(rec, clock)
    assert rec.stop() == tmp_path / "t.json"
    trace = load(tmp_path / "t.json")
    assert validate_trace(trace) == []
    assert trace["otherData"]["recording_in_progress"] is False
    assert not list(tmp_path.glob("*.tmp")), "temp files must be renamed or removed"


def test_export_copy_after_stop(tmp_path):
    clock = FakeClock()
    rec = TraceRecorder(streaming=False, clock=clock)
    rec.start()
    two_requests(rec, clock)
    rec.stop()
    out = rec.save(tmp_path / "sub" / "export.json")
    assert validate_trace(load(out)) == []


def test_save_without_a_path_says_so():
    with pytest.raises(ValueError, match="path"):
        TraceRecorder(streaming=False).save()


def test_streaming_file_is_valid_as_soon_as_recording_starts(tmp_path):
    rec = TraceRecorder(tmp_path / "live.json", flush_interval_s=3600)
    rec.start()
    try:
        assert validate_trace(load(tmp_path / "live.json")) == []
    finally:
        rec.stop()


def test_flush_mid_recording_closes_open_spans_provisionally(tmp_path):
    clock = FakeClock()
    rec = TraceRecorder(tmp_path / "live.json", clock=clock, flush_interval_s=3600)
    rec.start()
    rec.on_event(SubmittedEvent(request_id=1, t=1000.0, prompt_tokens=4))
    clock.now = 1000.5
    rec.on_event(token(1, 0))
    rec.flush()                                     # what the flush thread does
    trace = load(tmp_path / "live.json")
    assert validate_trace(trace) == []
    assert trace["otherData"]["recording_in_progress"] is True
    (e,) = [e for e in trace["traceEvents"] if e["ph"] == "e"]
    assert e["args"]["reason"] == "recording in progress"
    # The provisional end is not kept: request 1's real finish (in the
    # scenario, which reuses id 1) replaces it.
    two_requests(rec, clock, t0=1001.0)
    rec.stop()
    final = load(tmp_path / "live.json")
    assert validate_trace(final) == []
    assert [e["args"]["reason"] for e in final["traceEvents"] if e["ph"] == "e"
            and e["id"] == 1] == ["length"]


def test_periodic_flush_thread_writes_new_events(tmp_path):
    path = tmp_path / "live.json"
    clock = FakeClock()
    rec = TraceRecorder(path, clock=clock, flush_interval_s=0.05)
    flushed = threading.Event()
    rec.start()
    two_requests(rec, clock)

    def has_steps():
        return any(e["ph"] == "X" for e in load(path)["traceEvents"])
    for _ in range(600):                            # a sync point, not a timing assertion
        if has_steps():
            flushed.set()
            break
        threading.Event().wait(0.05)
    rec.stop()
    assert flushed.is_set(), "flush thread never rewrote the file"
    assert validate_trace(load(path)) == []


def test_dropped_recorder_still_leaves_a_valid_file(tmp_path):
    path = tmp_path / "dropped.json"
    clock = FakeClock()
    rec = TraceRecorder(path, clock=clock, flush_interval_s=3600)
    rec.start()
    two_requests(rec, clock)
    rec.on_event(SubmittedEvent(request_id=9, t=clock.now, prompt_tokens=1))   # left open
    del rec
    gc.collect()
    trace = load(path)
    assert validate_trace(trace) == []
    assert any(e["ph"] == "b" and e["id"] == 9 for e in trace["traceEvents"])


def test_interpreter_exit_without_stop_leaves_a_valid_file(tmp_path):
    path = tmp_path / "atexit.json"
    script = textwrap.dedent(f"""
        import time
        from engine.events import StepEvent, SubmittedEvent
        from engine.telemetry import TraceRecorder
        rec = TraceRecorder({str(path)!r}, flush_interval_s=3600)
        rec.start()
        t = time.perf_counter()       # events after the recording began
        rec.on_event(SubmittedEvent(request_id=1, t=t, prompt_tokens=3))
        rec.on_event(StepEvent(step=0, t_start=t, t_end=t + 0.01, kind="prefill",
                               prefill_request_ids=(1,), prefill_tokens=3))
        # no stop(): the app was closed mid-recording
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO, env=env, timeout=120)
    trace = load(path)
    assert validate_trace(trace) == []
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == ["prefill_chunk"]


def test_restart_discards_the_previous_recording():
    clock = FakeClock()
    rec = TraceRecorder(streaming=False, clock=clock)
    rec.start()
    two_requests(rec, clock)
    rec.start()
    assert rec.is_recording
    assert [e for e in rec.to_dict()["traceEvents"] if e["ph"] != "M"] == []


# -- the validator catches each kind of fault ---------------------------------

@pytest.fixture
def good():
    clock = FakeClock()
    rec = TraceRecorder(streaming=False, clock=clock)
    rec.start()
    two_requests(rec, clock)
    rec.stop()
    trace = rec.to_dict()
    assert validate_trace(trace) == []
    return trace


def first(trace, ph, name=None):
    return next(e for e in trace["traceEvents"]
                if e["ph"] == ph and (name is None or e["name"] == name))


def mutate(trace, fn):
    bad = copy.deepcopy(trace)
    fn(bad)
    return validate_trace(bad)


def test_validator_catches_missing_end(good):
    errs = mutate(good, lambda t: t["traceEvents"].remove(first(t, "e")))
    assert any("no end" in e for e in errs)


def test_validator_catches_negative_duration(good):
    errs = mutate(good, lambda t: first(t, "X").__setitem__("dur", -1))
    assert any("duration" in e for e in errs)


def test_validator_catches_time_going_back_on_a_track(good):
    def back(t):
        xs = [e for e in t["traceEvents"] if e["ph"] == "X"]
        xs[-1]["ts"] = xs[0]["ts"] - 1
    assert any("goes back" in e for e in mutate(good, back))


def test_validator_catches_two_values_in_one_counter(good):
    errs = mutate(good, lambda t: first(t, "C")["args"].__setitem__("other", 1))
    assert any("exactly one value" in e for e in errs)


def test_validator_catches_non_numeric_counter_and_nan(good):
    assert mutate(good, lambda t: first(t, "C")["args"].__setitem__("value", "fast"))
    assert mutate(good, lambda t: first(t, "C")["args"].__setitem__("value", float("nan")))


def test_validator_catches_instant_outside_its_span(good):
    def move(t):
        n = first(t, "n", "first_token")
        t["traceEvents"].remove(n)
        t["traceEvents"].append(n)      # after the span's end, on the same async track
        n["ts"] = max(e["ts"] for e in t["traceEvents"] if e["ph"] == "e") + 1
    assert any("outside" in e for e in mutate(good, move))


def test_validator_rejects_a_non_trace():
    assert validate_trace([]) and validate_trace({"traceEvents": "x"})
