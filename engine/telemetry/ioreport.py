"""macOS GPU sampler: IOReport, IOKit and CoreFoundation through ctypes, no sudo.

Everything native is loaded lazily in IOReportSampler() and only on darwin,
so importing this module is harmless anywhere. The arithmetic lives in
ioreport_math (tested on recorded fixtures); this file only copies numbers
out of CoreFoundation objects. Any failure after construction degrades to a
reading of n/a with the reason; a failure in the constructor raises, and
make_sampler() falls back to the CPU sampler.
"""
from __future__ import annotations

import ctypes
import sys
import time
from ctypes import POINTER, byref, c_char_p, c_int32, c_int64, c_long, c_uint32, c_uint64, c_void_p

from engine.telemetry import ioreport_math as m
from engine.telemetry.reading import Reading

SOURCE = "IOReport"
MHZ_LABEL = "DVFS-weighted MHz"

_IOREPORT = "/usr/lib/libIOReport.dylib"
_IOKIT = "/System/Library/Frameworks/IOKit.framework/IOKit"
_COREFOUNDATION = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
_UTF8 = 0x08000100          # kCFStringEncodingUTF8


class _Native:
    """The C functions used here, with their signatures declared once."""

    def __init__(self) -> None:
        cf = ctypes.CDLL(_COREFOUNDATION)
        iokit = ctypes.CDLL(_IOKIT)
        ior = ctypes.CDLL(_IOREPORT)
        vp = c_void_p
        _sig(cf.CFStringCreateWithCString, vp, [vp, c_char_p, c_uint32])
        _sig(cf.CFStringGetCString, ctypes.c_bool, [vp, c_char_p, c_long, c_uint32])
        _sig(cf.CFDictionaryGetValue, vp, [vp, vp])
        _sig(cf.CFDictionaryGetCount, c_long, [vp])
        _sig(cf.CFDictionaryCreateMutableCopy, vp, [vp, c_long, vp])
        _sig(cf.CFArrayGetCount, c_long, [vp])
        _sig(cf.CFArrayGetValueAtIndex, vp, [vp, c_long])
        _sig(cf.CFDataGetLength, c_long, [vp])
        _sig(cf.CFDataGetBytePtr, vp, [vp])
        _sig(cf.CFRelease, None, [vp])
        _sig(iokit.IOServiceMatching, vp, [c_char_p])
        _sig(iokit.IOServiceGetMatchingServices, ctypes.c_int, [c_uint32, vp, POINTER(c_uint32)])
        _sig(iokit.IOIteratorNext, c_uint32, [c_uint32])
        _sig(iokit.IORegistryEntryGetName, ctypes.c_int, [c_uint32, c_char_p])
        _sig(iokit.IORegistryEntryCreateCFProperty, vp, [c_uint32, vp, vp, c_uint32])
        _sig(iokit.IOObjectRelease, ctypes.c_int, [c_uint32])
        _sig(ior.IOReportCopyChannelsInGroup, vp, [vp, vp, c_uint64, c_uint64, c_uint64])
        _sig(ior.IOReportMergeChannels, None, [vp, vp, vp])
        _sig(ior.IOReportCreateSubscription, vp, [vp, vp, POINTER(vp), c_uint64, vp])
        _sig(ior.IOReportCreateSamples, vp, [vp, vp, vp])
        _sig(ior.IOReportCreateSamplesDelta, vp, [vp, vp, vp])
        for name in ("IOReportChannelGetGroup", "IOReportChannelGetSubGroup",
                     "IOReportChannelGetChannelName", "IOReportChannelGetUnitLabel"):
            _sig(getattr(ior, name), vp, [vp])
        _sig(ior.IOReportSimpleGetIntegerValue, c_int64, [vp, c_int32])
        _sig(ior.IOReportStateGetCount, c_int32, [vp])
        _sig(ior.IOReportStateGetNameForIndex, vp, [vp, c_int32])
        _sig(ior.IOReportStateGetResidency, c_int64, [vp, c_int32])
        self.cf, self.iokit, self.ior = cf, iokit, ior

    def cfstr(self, text: str) -> int:
        """A new CFString; the caller releases it."""
        ref = self.cf.CFStringCreateWithCString(None, text.encode(), _UTF8)
        if not ref:
            raise RuntimeError(f"CFStringCreateWithCString failed for {text!r}")
        return ref

    def pystr(self, ref: int | None) -> str:
        if not ref:
            return ""
        buf = ctypes.create_string_buffer(512)
        if not self.cf.CFStringGetCString(ref, buf, len(buf), _UTF8):
            return ""
        return buf.value.decode("utf-8", "replace")

    def release(self, ref: int | None) -> None:
        if ref:
            self.cf.CFRelease(ref)


def _sig(fn, restype, argtypes) -> None:
    fn.restype = restype
    fn.argtypes = argtypes


def read_voltage_states9(native: _Native) -> bytes:
    """The raw voltage-states9 property of the pmgr node (the GPU DVFS table)."""
    matching = native.iokit.IOServiceMatching(b"AppleARMIODevice")
    iterator = c_uint32(0)
    # IOServiceGetMatchingServices consumes the matching dictionary: no release.
    if native.iokit.IOServiceGetMatchingServices(0, matching, byref(iterator)) != 0:
        raise RuntimeError("IOServiceGetMatchingServices(AppleARMIODevice) failed")
    try:
        while entry := native.iokit.IOIteratorNext(iterator.value):
            try:
                name = ctypes.create_string_buffer(128)     # io_name_t
                if native.iokit.IORegistryEntryGetName(entry, name) != 0:
                    continue
                if name.value == b"pmgr":
                    return _copy_data_property(native, entry, "voltage-states9")
            finally:
                native.iokit.IOObjectRelease(entry)
    finally:
        native.iokit.IOObjectRelease(iterator.value)
    raise RuntimeError("no pmgr node in the IO registry")


def _copy_data_property(native: _Native, entry: int, key: str) -> bytes:
    cf_key = native.cfstr(key)
    try:
        data = native.iokit.IORegistryEntryCreateCFProperty(entry, cf_key, None, 0)
    finally:
        native.release(cf_key)
    if not data:
        raise RuntimeError(f"pmgr has no {key} property")
    try:
        length = native.cf.CFDataGetLength(data)
        return ctypes.string_at(native.cf.CFDataGetBytePtr(data), length)
    finally:
        native.release(data)


class IOReportSampler:
    """GPU DVFS-weighted MHz and GPU watts from one IOReport subscription."""
    source = SOURCE
    mhz_label = MHZ_LABEL

    def __init__(self) -> None:
        if sys.platform != "darwin":
            raise RuntimeError("IOReport exists only on macOS")
        self._n = _Native()
        self.freqs_mhz = m.gpu_freqs_mhz(read_voltage_states9(self._n))
        if not self.freqs_mhz:
            raise RuntimeError("voltage-states9 holds no GPU frequencies")
        self._channels = self._subscribe_channels()
        self._subscribed = c_void_p()     # filled by IOReport; we own it
        self._sub = self._n.ior.IOReportCreateSubscription(
            None, self._channels, byref(self._subscribed), 0, None)
        if not self._sub:
            self._n.release(self._channels)
            raise RuntimeError("IOReportCreateSubscription failed")
        self._prev = self._sample()       # (t, CFDictionaryRef) baseline for the first delta

    def _subscribe_channels(self) -> int:
        energy = self._copy_group(m.ENERGY_GROUP, None)
        gpu = self._copy_group(m.GPU_STATS_GROUP, m.GPU_PSTATES_SUBGROUP)
        try:
            self._n.ior.IOReportMergeChannels(energy, gpu, None)
            count = self._n.cf.CFDictionaryGetCount(energy)
            # The subscription wants a mutable dictionary it can annotate.
            return self._n.cf.CFDictionaryCreateMutableCopy(None, count, energy)
        finally:
            self._n.release(energy)
            self._n.release(gpu)

    def _copy_group(self, group: str, subgroup: str | None) -> int:
        g = self._n.cfstr(group)
        s = self._n.cfstr(subgroup) if subgroup else None
        try:
            chans = self._n.ior.IOReportCopyChannelsInGroup(g, s, 0, 0, 0)
        finally:
            self._n.release(g)
            self._n.release(s)
        if not chans:
            raise RuntimeError(f"IOReport has no channel group {group!r}")
        return chans

    def _sample(self) -> tuple[float, int]:
        ref = self._n.ior.IOReportCreateSamples(self._sub, self._channels, None)
        if not ref:
            raise RuntimeError("IOReportCreateSamples returned nothing")
        return time.perf_counter(), ref

    def read(self) -> Reading:
        try:
            t, cur = self._sample()
        except Exception as exc:  # noqa: BLE001 -- degrade to n/a, keep sampling
            return Reading.unavailable(time.perf_counter(), SOURCE, str(exc), MHZ_LABEL)
        t0, prev = self._prev
        self._prev = (t, cur)
        delta = self._n.ior.IOReportCreateSamplesDelta(prev, cur, None)
        self._n.release(prev)
        if not delta:
            return Reading.unavailable(t, SOURCE, "IOReportCreateSamplesDelta failed", MHZ_LABEL)
        try:
            channels = self._channel_samples(delta)
        finally:
            self._n.release(delta)
        s = m.summarize(channels, self.freqs_mhz, t - t0)
        return Reading(t=t, gpu_mhz=s.mhz, gpu_watts=s.watts, mhz_label=MHZ_LABEL,
                       source=SOURCE, power_note=s.power_note, reason=s.mhz_reason,
                       gpu_active=s.active)

    def _channel_samples(self, delta: int) -> list[m.ChannelSample]:
        """Copy the two channels we use out of a delta sample."""
        key = self._n.cfstr("IOReportChannels")
        try:
            items = self._n.cf.CFDictionaryGetValue(delta, key)
        finally:
            self._n.release(key)
        out = []
        for i in range(self._n.cf.CFArrayGetCount(items) if items else 0):
            item = self._n.cf.CFArrayGetValueAtIndex(items, i)
            sample = self._channel_sample(item)
            if sample is not None:
                out.append(sample)
        return out

    def _channel_sample(self, item: int) -> m.ChannelSample | None:
        ior, s = self._n.ior, self._n.pystr
        group = s(ior.IOReportChannelGetGroup(item))
        name = s(ior.IOReportChannelGetChannelName(item))
        if group == m.ENERGY_GROUP and name == m.GPU_ENERGY_CHANNEL:
            return m.ChannelSample(group, "", name, s(ior.IOReportChannelGetUnitLabel(item)),
                                   value=ior.IOReportSimpleGetIntegerValue(item, 0))
        subgroup = s(ior.IOReportChannelGetSubGroup(item))
        if (group, subgroup, name) == (m.GPU_STATS_GROUP, m.GPU_PSTATES_SUBGROUP,
                                       m.GPU_PSTATES_CHANNEL):
            states = tuple((s(ior.IOReportStateGetNameForIndex(item, k)),
                            ior.IOReportStateGetResidency(item, k))
                           for k in range(ior.IOReportStateGetCount(item)))
            return m.ChannelSample(group, subgroup, name, states=states)
        return None

    def close(self) -> None:
        if getattr(self, "_sub", None):
            self._n.release(self._prev[1])
            self._n.release(self._channels)
            self._n.release(self._subscribed.value)
            self._n.release(self._sub)
            self._sub = None
