"""validate_trace: the structural rules our Chrome trace files must keep.

Used by the tests and the benchmark. It checks what makes Perfetto and
chrome://tracing draw a trace correctly, not our content: every async begin
has its end (and instants lie inside), complete slices have non-negative
durations, timestamps never go back on a track, counters carry one finite
number per name, and the whole thing is strict JSON (no NaN).
"""
from __future__ import annotations

import json
import math

_TIMED_PHASES = frozenset("XBEiIbenC")


def validate_trace(obj: object) -> list[str]:
    """Problems found in a parsed trace (empty list: valid)."""
    errors: list[str] = []
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    if obj.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        errors.append(f"displayTimeUnit {obj.get('displayTimeUnit')!r} is not ms or ns")
    try:
        json.dumps(obj, allow_nan=False)
    except ValueError as exc:
        errors.append(f"not strict JSON: {exc}")
    last_ts: dict[tuple, float] = {}
    spans: dict[tuple, list[float]] = {}      # (pid, cat, id) -> [begin ts, end ts or nan]
    for i, ev in enumerate(obj["traceEvents"]):
        problem = _check_event(i, ev, last_ts, spans)
        if problem:
            errors.append(problem)
    for key, (_b, e) in spans.items():
        if math.isnan(e):
            errors.append(f"async span {key} has a begin but no end")
    return errors


def _check_event(i, ev, last_ts, spans) -> str | None:
    if not isinstance(ev, dict) or not isinstance(ev.get("ph"), str):
        return f"event {i}: not an object with a ph"
    ph = ev["ph"]
    if ph == "M":
        return None if isinstance(ev.get("args"), dict) else f"event {i}: metadata without args"
    if ph not in _TIMED_PHASES:
        return None
    ts = ev.get("ts")
    if not _is_number(ts):
        return f"event {i} ({ph}): ts {ts!r} is not a number"
    if "pid" not in ev:
        return f"event {i} ({ph}): no pid"
    if ph == "X":
        dur = ev.get("dur")
        if not _is_number(dur) or dur < 0:
            return f"event {i}: X duration {dur!r} is not a number >= 0"
    if ph == "C":
        problem = _check_counter(i, ev)
        if problem:
            return problem
    track = _track(ev)
    if ts < last_ts.get(track, -math.inf):
        return f"event {i} ({ph} {ev.get('name')!r}): ts {ts} goes back on track {track}"
    last_ts[track] = ts
    if ph in "ben":
        return _check_async(i, ev, ts, spans)
    return None


def _track(ev: dict) -> tuple:
    ph = ev["ph"]
    if ph == "C":
        return ("counter", ev["pid"], ev.get("name"))
    if ph in "ben":
        return ("async", ev["pid"], ev.get("cat"), str(ev.get("id")))
    return ("thread", ev["pid"], ev.get("tid"))


def _check_counter(i: int, ev: dict) -> str | None:
    args = ev.get("args")
    if not isinstance(args, dict) or len(args) != 1:
        return f"event {i}: counter {ev.get('name')!r} must carry exactly one value, got {args!r}"
    (value,) = args.values()
    if not _is_number(value):
        return f"event {i}: counter {ev.get('name')!r} value {value!r} is not a finite number"
    return None


def _check_async(i, ev, ts, spans) -> str | None:
    # Timestamps on an async track never go back (checked before this), so an
    # instant while its span is open lies between the span's begin and end.
    if "id" not in ev:
        return f"event {i}: async {ev['ph']} without id"
    key = (ev["pid"], ev.get("cat"), str(ev["id"]))
    ph = ev["ph"]
    if ph == "b":
        if key in spans and math.isnan(spans[key][1]):
            return f"event {i}: async span {key} begins again before it ended"
        spans[key] = [ts, math.nan]
    elif ph == "e":
        if key not in spans or not math.isnan(spans[key][1]):
            return f"event {i}: async end {key} without an open begin"
        spans[key][1] = ts
    elif key not in spans or not math.isnan(spans[key][1]):
        return f"event {i}: async instant {ev.get('name')!r} outside an open span {key}"
    return None


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
