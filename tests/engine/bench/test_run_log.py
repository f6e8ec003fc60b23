"""RunLog: each timed run starts from the same allocator state when asked to."""
import re
import time

import mlx.core as mx

from engine.bench.runs import RunLog, wall_clock


def _leave_buffers_cached():
    mx.eval(mx.zeros((1 << 18,)) + 1)       # leaves buffers in MLX's cache when it ends
    return 0.0, {"cached": mx.get_cache_memory()}


def _wait_for_a_cached_buffer(timeout_s: float = 10.0) -> None:
    """Leave a buffer in MLX's cache and wait until it is there. Session 48's H100 read an
    empty cache right after the eval; our reading of MLX's CUDA backend: a queue's
    completion handler holds its arrays and drops them after mx.eval has returned, so
    the buffer reaches the cache a little later. Not yet run on a GPU."""
    out = mx.zeros((1 << 18,)) + 1
    mx.eval(out)
    del out
    deadline = time.monotonic() + timeout_s
    while mx.get_cache_memory() == 0 and time.monotonic() < deadline:
        mx.synchronize()
        time.sleep(0.01)
    assert mx.get_cache_memory() > 0


def test_a_run_log_that_clears_the_cache_starts_each_run_with_it_empty():
    seen = []
    log = RunLog(clear_cache=True)
    for _ in range(2):
        log.timed(lambda: (0.0, {"cached": mx.get_cache_memory()}), engine="t", what="x", size=1)
        seen.append(log.runs[-1].extra["cached"])
        _leave_buffers_cached()
    assert seen == [0, 0]
    _wait_for_a_cached_buffer()
    kept = RunLog(clear_cache=False)
    kept.timed(lambda: (0.0, {"cached": mx.get_cache_memory()}), engine="t", what="x", size=1)
    assert kept.runs[-1].extra["cached"] > 0


class _Monitor:
    """A telemetry monitor's side RunLog reads: samples taken at the given times."""

    def __init__(self, times):
        from engine.telemetry.reading import Reading
        self.readings = [Reading(t=t, gpu_mhz=1980.0, gpu_watts=400.0, mhz_label="SM clock MHz",
                                 source="NVML") for t in times]

    def sample_once(self):
        pass

    def history(self, seconds=60.0):
        return list(self.readings)


def test_a_run_names_the_samples_taken_within_its_slowest_step_and_not_the_span():
    """Sampling the GPU's clock and power runs on a thread of its own: the run counts the
    samples begun within its slowest step, to show whether they coincide."""
    log = RunLog(monitor=_Monitor([1.0, 2.05, 2.09, 3.0]))
    log.timed(lambda: (0.01, {"slowest_s": 0.1, "slowest_span": (2.0, 2.1)}),
              engine="t", what="decode", size=1)
    clock = log.runs[-1].extra.pop("slowest_clock")
    assert log.runs[-1].extra == {"slowest_samples": 2}
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d\d\d", clock)
    quiet = RunLog()                                  # no monitor: no count, no span
    quiet.timed(lambda: (0.01, {"slowest_span": (2.0, 2.1)}), engine="t", what="decode", size=1)
    assert set(quiet.runs[-1].extra) == {"slowest_clock"}


def test_a_steps_clock_is_the_wall_clock_of_its_perf_counter_time():
    """The slowest step's start as the wall clock reads it (UTC), to the millisecond."""
    import time
    now = time.perf_counter()
    shown = wall_clock(now - 1.5)
    expect = time.time() - 1.5
    h, m, sec = shown.split(":")
    got = int(h) * 3600 + int(m) * 60 + float(sec)
    assert abs((got - expect % 86400 + 43200) % 86400 - 43200) < 0.05


def test_a_steps_log_has_a_line_a_decode_run_with_each_steady_step(tmp_path):
    """`engine bench --steps-log PATH`: each Tandem decode run's steady steps, by the wall
    clock, with their split and the samples within each; runs without steps write none."""
    import json

    from engine.events import StepEvent
    steps = [StepEvent(step=i, t_start=t, t_end=t + d, kind="decode", batch_size=2,
                       queue_s=q, queue_cpu_s=q, read_s=0.001)
             for i, (t, d, q) in enumerate([(2.0, 0.01, 0.006), (2.01, 0.03, 0.02)])]
    path = tmp_path / "steps.jsonl"
    log = RunLog(monitor=_Monitor([2.02]), steps_log=str(path))
    log.timed(lambda: (0.02, {"step_records": steps}), engine="tandem", what="decode", size=2)
    log.timed(lambda: (0.3, {}), engine="tandem", what="prefill", size=128)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["size"] == 2 and "step_records" not in log.runs[0].extra
    got = [{k: v for k, v in s.items() if k != "clock"} for s in lines[0]["steps"]]
    assert got == [{"ms": 10.0, "queue_ms": 6.0, "queue_cpu_ms": 6.0, "read_ms": 1.0, "samples": 0},
                   {"ms": 30.0, "queue_ms": 20.0, "queue_cpu_ms": 20.0, "read_ms": 1.0,
                    "samples": 1}]


def test_the_steps_log_keeps_the_steps_the_rows_joined_in(tmp_path):
    """What the first steady step's span waited for: the steps before it, with their
    kind, rows and prompt tokens, logged beside the steady ones."""
    import json

    from engine.events import StepEvent
    joined = [StepEvent(step=0, t_start=1.0, t_end=1.09, kind="prefill", prefill_tokens=512,
                        queue_s=0.004, queue_cpu_s=0.004, read_s=0.08),
              StepEvent(step=1, t_start=1.09, t_end=1.19, kind="decode", batch_size=16,
                        queue_s=0.007, queue_cpu_s=0.007, read_s=0.006)]
    steady = [StepEvent(step=2, t_start=1.19, t_end=1.2, kind="decode", batch_size=16,
                        queue_s=0.005, queue_cpu_s=0.005, read_s=0.003)]
    path = tmp_path / "steps.jsonl"
    log = RunLog(steps_log=str(path))
    log.timed(lambda: (0.01, {"step_records": steady, "lead_in_records": joined}),
              engine="tandem", what="decode", size=16)
    assert "lead_in_records" not in log.runs[-1].extra
    line = json.loads(path.read_text())
    got = [{k: v for k, v in s.items() if k != "clock"} for s in line["lead_in"]]
    assert got == [{"kind": "prefill", "rows": 0, "prompt_tokens": 512, "ms": 90.0,
                    "queue_ms": 4.0, "queue_cpu_ms": 4.0, "read_ms": 80.0},
                   {"kind": "decode", "rows": 16, "prompt_tokens": 0, "ms": 100.0,
                    "queue_ms": 7.0, "queue_cpu_ms": 7.0, "read_ms": 6.0}]
