"""IOReportSampler's read() flow over a fake CoreFoundation/IOReport layer.

The real ctypes calls only run on a Mac; this checks, anywhere, that the
sampler copies the right channels out of a delta sample, differences real
time, releases what it creates, and turns the recorded fixture into the
expected reading.
"""
import json
from pathlib import Path

import pytest

from engine.telemetry import ioreport
from engine.telemetry import ioreport_math as m

FIXTURES = Path(__file__).parent / "fixtures"


class FakeNative:
    """Hands out integer refs for Python objects, the way CF hands out pointers."""

    def __init__(self, channels):
        self.objects = {}
        self.released = []
        self.channels = channels
        self.cf = self.ior = self        # the sampler calls self._n.cf.X / self._n.ior.X

    def _ref(self, obj):
        ref = len(self.objects) + 1
        self.objects[ref] = obj
        return ref

    def cfstr(self, text):
        return self._ref(text)

    def pystr(self, ref):
        return self.objects[ref] if ref else ""

    def release(self, ref):
        if ref:
            self.released.append(ref)

    # IOReport
    def IOReportCreateSamples(self, sub, chans, _):
        return self._ref(("sample",))

    def IOReportCreateSamplesDelta(self, prev, cur, _):
        items = [self._ref(c) for c in self.channels]
        return self._ref({"IOReportChannels": self._ref(items)})

    def CFDictionaryGetValue(self, d, key):
        return self.objects[d].get(self.objects[key])

    def CFArrayGetCount(self, arr):
        return len(self.objects[arr])

    def CFArrayGetValueAtIndex(self, arr, i):
        return self.objects[arr][i]

    def _field(self, item, name):
        return self._ref(self.objects[item][name])

    def IOReportChannelGetGroup(self, item):
        return self._field(item, "group")

    def IOReportChannelGetSubGroup(self, item):
        return self._field(item, "subgroup")

    def IOReportChannelGetChannelName(self, item):
        return self._field(item, "channel")

    def IOReportChannelGetUnitLabel(self, item):
        return self._field(item, "unit")

    def IOReportSimpleGetIntegerValue(self, item, _):
        return self.objects[item]["value"]

    def IOReportStateGetCount(self, item):
        return len(self.objects[item]["states"])

    def IOReportStateGetNameForIndex(self, item, k):
        return self._ref(self.objects[item]["states"][k][0])

    def IOReportStateGetResidency(self, item, k):
        return self.objects[item]["states"][k][1]


def make_sampler(native, freqs):
    # Bypass __init__ (which loads the real frameworks) and set what it would.
    s = object.__new__(ioreport.IOReportSampler)
    s._n = native
    s.freqs_mhz = freqs
    s._channels = native._ref("channels")
    s._subscribed = type("Ref", (), {"value": native._ref("subscribed")})()
    s._sub = native._ref("sub")
    s._prev = s._sample()
    return s


def test_read_turns_a_recorded_sample_into_a_reading(monkeypatch):
    fx = json.loads((FIXTURES / "ioreport_sample.json").read_text())
    tables = json.loads((FIXTURES / "voltage_states9.json").read_text())
    freqs = m.gpu_freqs_mhz(bytes.fromhex(tables[fx["table"]]["hex"]))
    native = FakeNative(fx["channels"])
    clock = iter([50.0, 50.0 + fx["dt_s"]])
    monkeypatch.setattr(ioreport.time, "perf_counter", lambda: next(clock))
    s = make_sampler(native, freqs)
    first_sample = s._prev[1]
    r = s.read()
    assert r.gpu_mhz == pytest.approx(fx["expected_mhz"])
    assert r.gpu_watts == pytest.approx(fx["expected_w"])
    assert r.gpu_active == pytest.approx(fx["expected_active"])
    assert (r.source, r.mhz_label, r.t) == ("IOReport", "DVFS-weighted MHz", 50.0 + fx["dt_s"])
    assert first_sample in native.released          # the old sample is freed once differenced
    s.close()
    s.close()
    assert native.released.count(s._prev[1]) == 1


def test_failed_sample_degrades_to_na():
    native = FakeNative([])
    s = make_sampler(native, [400.0])
    native.IOReportCreateSamples = lambda *a: None
    r = s.read()
    assert r.gpu_mhz is None and r.gpu_watts is None and "IOReportCreateSamples" in r.reason
    assert r.mhz_text == "n/a"


def test_sample_without_gpu_channels_says_which_is_missing():
    s = make_sampler(FakeNative([{"group": "CPU Stats", "subgroup": "x", "channel": "y",
                                  "unit": "", "value": 1}]), [400.0])
    r = s.read()
    assert r.gpu_mhz is None and "GPUPH" in r.reason
    assert r.gpu_watts is None and "GPU Energy" in r.power_note
