"""TelemetryMonitor: history, listeners, failure handling, thread lifecycle."""
import threading
import time

import pytest

from engine.telemetry import TelemetryMonitor
from engine.telemetry.reading import Reading


class ScriptedSampler:
    source = "fake"
    mhz_label = "GPU MHz"

    def __init__(self, mhz_values, fail_at=()):
        self.values = list(mhz_values)
        self.fail_at = set(fail_at)
        self.calls = 0
        self.closed = False

    def read(self):
        self.calls += 1
        if self.calls in self.fail_at:
            raise OSError("sensor went away")
        mhz = self.values[(self.calls - 1) % len(self.values)]
        return Reading(t=time.perf_counter(), gpu_mhz=mhz, gpu_watts=5.0,
                       mhz_label=self.mhz_label, source=self.source)

    def close(self):
        self.closed = True


def test_latest_before_any_sample_is_na():
    mon = TelemetryMonitor(sampler=ScriptedSampler([1.0]))
    r = mon.latest()
    assert r.gpu_mhz is None and r.mhz_text == "n/a" and r.reason


def test_sample_once_records_history_and_notifies_listeners():
    mon = TelemetryMonitor(sampler=ScriptedSampler([100.0, 200.0, 300.0]))
    seen = []
    mon.add_listener(seen.append)
    for _ in range(3):
        mon.sample_once()
    assert [r.gpu_mhz for r in mon.history(seconds=3600)] == [100.0, 200.0, 300.0]
    assert mon.latest().gpu_mhz == 300.0
    assert [r.gpu_mhz for r in seen] == [100.0, 200.0, 300.0]
    mon.remove_listener(seen.append)
    mon.sample_once()
    assert len(seen) == 3


def test_history_window_excludes_old_readings():
    mon = TelemetryMonitor(sampler=ScriptedSampler([1.0]))
    mon._history.append(Reading(t=time.perf_counter() - 120, gpu_mhz=9.0, gpu_watts=None,
                                mhz_label="x", source="fake"))
    mon.sample_once()
    assert [r.gpu_mhz for r in mon.history(seconds=60)] == [1.0]


def test_sampler_exception_becomes_na_reading_and_sampling_continues():
    mon = TelemetryMonitor(sampler=ScriptedSampler([7.0], fail_at={1}))
    bad = mon.sample_once()
    assert bad.gpu_mhz is None and "sensor went away" in bad.reason
    assert mon.sample_once().gpu_mhz == 7.0


def test_failing_listener_does_not_stop_others():
    mon = TelemetryMonitor(sampler=ScriptedSampler([1.0]))
    seen = []
    mon.add_listener(lambda r: 1 / 0)
    mon.add_listener(seen.append)
    mon.sample_once()
    assert len(seen) == 1


def test_thread_samples_until_stopped():
    sampler = ScriptedSampler([1.0])
    mon = TelemetryMonitor(interval_s=0.05, sampler=sampler)
    got = threading.Event()
    readings = []

    def on_reading(r):
        readings.append(r)
        if len(readings) >= 3:
            got.set()
    mon.add_listener(on_reading)
    mon.start()
    mon.start()                                   # idempotent
    assert got.wait(timeout=30), "monitor thread produced no readings"
    mon.stop()
    assert not mon.is_running
    n = sampler.calls
    mon.sample_once()                             # still usable by hand after stop
    assert sampler.calls == n + 1
    assert not sampler.closed                     # caller's sampler stays open


@pytest.mark.parametrize("interval", [0.0, -1.0, 60.0])
def test_interval_is_validated(interval):
    with pytest.raises(ValueError):
        TelemetryMonitor(interval_s=interval, sampler=ScriptedSampler([1.0]))


def test_reading_rejects_nan():
    with pytest.raises(ValueError):
        Reading(t=0.0, gpu_mhz=float("nan"), gpu_watts=None, mhz_label="x", source="y")


def test_reading_texts():
    r = Reading(t=0.0, gpu_mhz=1397.6, gpu_watts=12.34, mhz_label="DVFS-weighted MHz",
                source="IOReport", power_note="energy delta (mJ)")
    assert (r.mhz_text, r.watts_text) == ("1398 MHz", "12.3 W")
    assert "DVFS-weighted MHz from IOReport" in r.tooltip
