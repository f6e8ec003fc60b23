"""What a recorded engine run looks like in the trace."""
import pytest
from telemetry_trace_scenario import FakeClock, token, two_requests

from engine.events import StepEvent, SubmittedEvent
from engine.telemetry import TraceRecorder, validate_trace


@pytest.fixture
def trace():
    clock = FakeClock()
    rec = TraceRecorder(clock=clock, streaming=False)
    rec.start()
    two_requests(rec, clock)
    rec.stop()
    return rec.to_dict()


def events(trace, ph=None, name=None):
    return [e for e in trace["traceEvents"]
            if (ph is None or e["ph"] == ph) and (name is None or e.get("name") == name)]


def test_trace_is_valid(trace):
    assert validate_trace(trace) == []
    assert trace["displayTimeUnit"] == "ms"


def test_two_requests_decoded_together(trace):
    batched = [e for e in events(trace, "X", "decode_step") if e["args"]["batch_size"] == 2]
    assert len(batched) == 3
    assert all(sorted(e["args"]["request_ids"]) == [1, 2] for e in batched)


def test_request_spans_contain_their_first_token(trace):
    for rid, reason in ((1, "length"), (2, "stop")):
        mine = [e for e in trace["traceEvents"] if e.get("cat") == "request" and e["id"] == rid]
        (b,) = [e for e in mine if e["ph"] == "b"]
        (e,) = [e for e in mine if e["ph"] == "e"]
        (n,) = [e for e in mine if e["ph"] == "n" and e["name"] == "first_token"]
        assert b["name"] == e["name"] == f"request {rid}"
        assert b["ts"] <= n["ts"] <= e["ts"]
        assert e["args"]["reason"] == reason
    firsts = {e["id"]: e["ts"] for e in events(trace, "n", "first_token")}
    assert firsts[1] < firsts[2]


def test_prefill_chunks_and_the_mixed_step(trace):
    chunks = events(trace, "X", "prefill_chunk")
    assert [(c["args"]["request_id"], c["args"]["tokens"]) for c in chunks] == [(1, 12), (2, 20)]
    mixed = [e for e in events(trace, "X") if e["args"]["step"] == 1]
    assert sorted(e["name"] for e in mixed) == ["decode_step", "prefill_chunk"]
    assert mixed[0]["ts"] == mixed[1]["ts"] and mixed[0]["dur"] == mixed[1]["dur"]


def test_step_slices_use_engine_times_in_microseconds(trace):
    first = events(trace, "X", "prefill_chunk")[0]
    assert first["ts"] == pytest.approx(1000.002 * 1e6)
    assert first["dur"] == pytest.approx(8000.0)


def test_counter_tracks(trace):
    def values(name):
        return [e["args"]["value"] for e in events(trace, "C", name)]
    assert 2 in values("batch size")
    assert values("decode tok/s") and max(values("decode tok/s")) == pytest.approx(2 / 0.008)
    assert values("prefill tok/s")[0] == pytest.approx(12 / 0.008)
    assert values("KV pages in use")[0] == 1
    assert values("GPU MHz")[0] == 1398.0 and values("GPU W")[0] == 12.5


def test_process_and_thread_names(trace):
    meta = {(e["name"], e["args"].get("name")) for e in events(trace, "M")}
    assert ("process_name", "Tandem") in meta
    assert ("thread_name", "engine loop") in meta


def test_only_the_first_token_of_a_request_is_kept():
    clock = FakeClock()
    rec = TraceRecorder(clock=clock, streaming=False)
    rec.start()
    rec.on_event(SubmittedEvent(request_id=7, t=1000.0, prompt_tokens=3))
    for i in range(100):
        clock.now = 1000.1 + i * 0.01
        rec.on_event(token(7, i))
    assert len(rec._s.records) == 2
    assert len(events(rec.to_dict(), "n", "first_token")) == 1


def test_request_running_before_recording_gets_a_span_from_the_start():
    clock = FakeClock(2000.0)
    rec = TraceRecorder(clock=clock, streaming=False)
    rec.start()
    clock.now = 2000.5
    rec.on_event(token(3, 9))           # no SubmittedEvent seen: not known to be the first
    trace = rec.to_dict()
    assert validate_trace(trace) == []
    (b,) = events(trace, "b")
    assert b["ts"] == pytest.approx(2000.0 * 1e6) and b["args"]["submitted_before_recording"]
    assert events(trace, "n", "first_token") == []


def test_overlapping_steps_are_clamped_to_nest():
    clock = FakeClock()
    rec = TraceRecorder(clock=clock, streaming=False)
    rec.start()
    rec.on_event(StepEvent(step=0, t_start=1000.000, t_end=1000.010, kind="decode",
                           decode_request_ids=(1,), batch_size=1))
    rec.on_event(StepEvent(step=1, t_start=1000.008, t_end=1000.018, kind="decode",
                           decode_request_ids=(1,), batch_size=1))
    trace = rec.to_dict()
    assert validate_trace(trace) == []
    second = events(trace, "X")[1]
    assert second["ts"] == pytest.approx(1000.010 * 1e6)
    assert second["args"]["clamped_us"] == pytest.approx(2000.0)


def test_idle_gap_drops_rates_to_zero():
    clock = FakeClock()
    rec = TraceRecorder(clock=clock, streaming=False)
    rec.start()
    for step, t in enumerate((1000.0, 1005.0)):          # five idle seconds between
        rec.on_event(StepEvent(step=step, t_start=t, t_end=t + 0.01, kind="decode",
                               decode_request_ids=(1,), batch_size=1))
    rates = [(e["ts"], e["args"]["value"]) for e in events(rec.to_dict(), "C", "decode tok/s")]
    assert [v for _, v in rates] == [pytest.approx(100.0), 0, pytest.approx(100.0)]
    assert rates[1][0] == pytest.approx(1000.01 * 1e6)


def test_events_are_ignored_when_not_recording():
    rec = TraceRecorder(streaming=False)
    rec.on_event(SubmittedEvent(request_id=1, t=1.0, prompt_tokens=1))
    assert not rec.is_recording
    assert events(rec.to_dict(), "b") == []
