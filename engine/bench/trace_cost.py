"""Micro-benchmark: what trace recording costs the engine thread.

    python -m engine.bench.trace_cost [--batch 8] [--step-ms 20] [--rounds 5]

Reports (1) the per-call cost of on_event / on_reading, off and on; (2) the
cost of formatting and atomically writing the trace, which happens on the
flush thread; (3) a synthetic decode loop (pure-Python busy work per step,
the worst case for GIL contention with the flush thread) run with recording
off and on, alternating A/B over several rounds, and the median slowdown.
The target is < 2% of decode tok/s. Timings live here, never in the tests.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from engine.events import FinishedEvent, RequestStats, StepEvent, SubmittedEvent, TokenEvent
from engine.telemetry.reading import Reading
from engine.telemetry.trace import TraceRecorder
from engine.telemetry.trace_check import validate_trace


def per_call_ns(fn, arg, n: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(n):
        fn(arg)
    return (time.perf_counter_ns() - t) / n


def bench_calls(n: int) -> None:
    step = StepEvent(step=1, t_start=1.0, t_end=1.01, kind="decode",
                     decode_request_ids=tuple(range(8)), batch_size=8)
    tok = TokenEvent(request_id=1, text="x", token_ids=(1,))
    rd = Reading(t=1.0, gpu_mhz=1398.0, gpu_watts=12.0, mhz_label="x", source="y")
    rec = TraceRecorder(streaming=False)
    print(f"on_event, not recording:     {per_call_ns(rec.on_event, step, n):8.0f} ns/call")
    rec.start()
    rec.on_event(tok)
    print(f"on_event StepEvent:          {per_call_ns(rec.on_event, step, n):8.0f} ns/call")
    print(f"on_event later TokenEvent:   {per_call_ns(rec.on_event, tok, n):8.0f} ns/call")
    print(f"on_reading:                  {per_call_ns(rec.on_reading, rd, n):8.0f} ns/call")
    rec.stop()


def feed_run(rec: TraceRecorder, num_steps: int, batch: int, work=None) -> float:
    """A decode loop of `batch` requests; returns steps per second."""
    t_begin = time.perf_counter()
    for rid in range(batch):
        rec.on_event(SubmittedEvent(request_id=rid, t=time.perf_counter(), prompt_tokens=16))
    ids = tuple(range(batch))
    for step in range(num_steps):
        t0 = time.perf_counter()
        if work is not None:
            work()
        rec.on_event(StepEvent(step=step, t_start=t0, t_end=time.perf_counter(), kind="decode",
                               decode_request_ids=ids, batch_size=batch,
                               kv_pages_used=step // 16, kv_pages_total=4096))
        for rid in ids:
            rec.on_event(TokenEvent(request_id=rid, text="x", token_ids=(step,)))
    stats = RequestStats(prompt_tokens=16, generated_tokens=num_steps, ttft_s=0.01,
                         decode_tok_s=1.0)
    for rid in ids:
        rec.on_event(FinishedEvent(request_id=rid, reason="length", stats=stats))
    return num_steps / (time.perf_counter() - t_begin)


def bench_write(num_steps: int, batch: int, folder: Path) -> None:
    rec = TraceRecorder(streaming=False)
    rec.start()
    feed_run(rec, num_steps, batch)
    for i in range(num_steps // 10):
        rec.on_reading(Reading(t=time.perf_counter(), gpu_mhz=1300.0 + i % 7, gpu_watts=10.0,
                               mhz_label="x", source="y"))
    t = time.perf_counter()
    rec._s.render_lock.acquire()
    rec._s.drain()
    rec._s.render_lock.release()
    fmt_s = time.perf_counter() - t
    n = len(rec._s.lines)
    t = time.perf_counter()
    path = rec.save(folder / "bench.json")
    write_s = time.perf_counter() - t
    print(f"format: {fmt_s / n * 1e6:6.2f} us/trace event ({n} events, {num_steps} steps)")
    print(f"full rewrite: {write_s * 1e3:7.1f} ms for {path.stat().st_size / 1e6:.1f} MB "
          f"-> flush spacing >= {50 * write_s:.1f} s keeps it under 2% of a core")
    import json
    errors = validate_trace(json.loads(path.read_text()))
    print(f"validate_trace: {'ok' if not errors else errors[:3]}")


def busy(step_ms: float):
    """Pure-Python work of about step_ms, calibrated once (holds the GIL throughout)."""
    n = 10_000
    t = time.perf_counter()
    sum(i * i for i in range(n))
    per = (time.perf_counter() - t) / n
    iters = max(1, int(step_ms / 1e3 / per))
    return lambda: sum(i * i for i in range(iters))


def bench_loop(batch: int, step_ms: float, rounds: int, folder: Path) -> None:
    work = busy(step_ms)
    num_steps = max(50, int(2.0 / (step_ms / 1e3)))      # ~2 s per run
    off, on = [], []
    for r in range(rounds):
        off.append(feed_run(TraceRecorder(streaming=False), num_steps, batch, work))
        rec = TraceRecorder(folder / f"loop{r}.json", flush_interval_s=0.5)   # flush often
        rec.start()
        on.append(feed_run(rec, num_steps, batch, work))
        rec.stop()
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"decode loop B={batch}, ~{step_ms} ms/step, {rounds} rounds A/B: "
          f"off {m_off * batch:.0f} tok/s, on {m_on * batch:.0f} tok/s, "
          f"slowdown {100 * (1 - m_on / m_off):+.2f}% (target < 2%)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_calls(args.calls)
        bench_write(20_000, args.batch, Path(tmp))
        bench_loop(args.batch, args.step_ms, args.rounds, Path(tmp))


if __name__ == "__main__":
    main()
