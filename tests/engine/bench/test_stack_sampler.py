"""StackSampler: what the engine thread ran within a window, for a slow step's diagnosis."""
import threading
import time

from engine.bench.runs import RunLog
from engine.bench.stack_sampler import StackSampler
from engine.events import StepEvent


def _slow_part(sampler: StackSampler, t0: float, done: threading.Event) -> None:
    # Stays here until the sampler has seen this frame three times: no timing assumed.
    deadline = time.perf_counter() + 30.0
    while time.perf_counter() < deadline:
        seen = [s for _, s in sampler.samples(t0, time.perf_counter()) if "_slow_part" in s]
        if len(seen) >= 3:
            break
        time.sleep(0.001)
    done.set()


def test_the_sampler_names_the_call_a_thread_spent_a_window_in():
    done = threading.Event()
    with StackSampler(thread_name="test-sampled", interval_s=0.001) as sampler:
        t0 = time.perf_counter()
        worker = threading.Thread(target=_slow_part, args=(sampler, t0, done),
                                  name="test-sampled")
        worker.start()
        worker.join()
        t1 = time.perf_counter()
    assert done.is_set()
    got = sampler.summary(t0, t1)
    top = got["stacks"][0]
    assert top["stack"].startswith("_slow_part (test_stack_sampler.py:")
    assert "run (threading.py:" in top["stack"]          # its callers follow, innermost first
    assert top["n"] >= 3 and got["samples"] >= 3
    assert 0 < got["longest_gap_ms"] <= 1e3 * (t1 - t0)


def test_a_window_without_samples_says_so_and_names_nothing():
    with StackSampler(thread_name="no-such-thread", interval_s=0.001) as sampler:
        time.sleep(0.01)
    got = sampler.summary(1.0, 1.5)
    assert got == {"samples": 0, "room": 500, "longest_gap_ms": 500.0, "stacks": []}


class _Stacks:
    """A sampler's side RunLog reads: the windows it was asked about."""

    def __init__(self):
        self.asked = []

    def summary(self, t0, t1):
        self.asked.append((t0, t1))
        return {"samples": 1, "stacks": [{"n": 1, "stack": f"at {t0}"}]}


def test_the_slowest_step_and_each_step_over_twice_the_median_get_their_stacks(tmp_path):
    import json
    steps = [StepEvent(step=i, t_start=t, t_end=t + d, kind="decode", batch_size=2,
                       queue_s=d, queue_cpu_s=d, read_s=0.0)
             for i, (t, d) in enumerate([(2.0, 0.01), (2.01, 0.01), (2.02, 0.05), (2.07, 0.01)])]
    path = tmp_path / "steps.jsonl"
    stacks = _Stacks()
    log = RunLog(steps_log=str(path), stacks=stacks)
    log.timed(lambda: (0.01, {"step_records": steps, "slowest_span": (2.02, 2.07)}),
              engine="tandem", what="decode", size=2)
    assert log.runs[-1].extra["slowest_stacks"]["stacks"] == [{"n": 1, "stack": "at 2.02"}]
    logged = json.loads(path.read_text())["steps"]
    assert ["stacks" in s for s in logged] == [False, False, True, False]
    assert logged[2]["stacks"]["stacks"][0]["stack"] == "at 2.02"
