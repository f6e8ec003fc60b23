"""CPU clock fallback for machines without a GPU sampler; power is n/a.

Reads only what the OS exposes without root: Linux cpufreq in sysfs, then
/proc/cpuinfo; on macOS sysctl hw.cpufrequency (present on Intel Macs only).
`root` lets tests point the sampler at a fake filesystem.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.telemetry.reading import Reading

MHZ_LABEL = "CPU MHz"
POWER_NOTE = "n/a: no power sensor readable on this machine"  # the CPU's row: "CPU W"


class CpuSampler:
    """Mean current CPU frequency across cores."""
    mhz_label = MHZ_LABEL

    def __init__(self, root: str | Path = "/", platform: str | None = None,
                 sysctl: Callable[[str], int | None] | None = None) -> None:
        self.root = Path(root)
        self.platform = platform or sys.platform
        self._sysctl = sysctl or _sysctl_int
        self.skipped = ""     # why better samplers were not used (set by make_sampler)
        self.source, self._read_mhz = self._probe()

    def _probe(self) -> tuple[str, Callable[[], float | None]]:
        # Pick the source once: probing every sample would cost syscalls for nothing.
        if self.platform == "darwin":
            if self._sysctl_mhz() is not None:
                return "sysctl", self._sysctl_mhz
            raise RuntimeError("sysctl hw.cpufrequency is not available (Apple silicon)")
        if self._cpufreq_mhz() is not None:
            return "cpufreq", self._cpufreq_mhz
        if self._procfs_mhz() is not None:
            return "procfs", self._procfs_mhz
        raise RuntimeError("neither cpufreq nor /proc/cpuinfo report a CPU frequency")

    def read(self) -> Reading:
        try:
            mhz, reason = self._read_mhz(), ""
        except OSError as exc:
            mhz, reason = None, f"{self.source}: {exc}"
        if mhz is None and not reason:
            reason = f"{self.source} reported no frequency"
        note = POWER_NOTE + (f" ({self.skipped})" if self.skipped else "")
        return Reading(t=time.perf_counter(), gpu_mhz=mhz, gpu_watts=None,
                       mhz_label=MHZ_LABEL, source=self.source,
                       power_note=note, reason=reason)

    def close(self) -> None:
        pass

    def _cpufreq_mhz(self) -> float | None:
        base = self.root / "sys/devices/system/cpu"
        khz = []
        for path in sorted(base.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
            try:
                khz.append(int(path.read_text().strip()))
            except (OSError, ValueError):
                continue    # an offline core disappears between glob and read
        return sum(khz) / len(khz) / 1000.0 if khz else None

    def _procfs_mhz(self) -> float | None:
        try:
            text = (self.root / "proc/cpuinfo").read_text()
        except OSError:
            return None
        values = []
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() == "cpu mhz":
                try:
                    values.append(float(value))
                except ValueError:
                    continue
        return sum(values) / len(values) if values else None

    def _sysctl_mhz(self) -> float | None:
        hz = self._sysctl("hw.cpufrequency")
        return hz / 1e6 if hz else None


def _sysctl_int(name: str) -> int | None:
    """sysctlbyname for a 64-bit integer, without spawning a process each sample."""
    libc_path = ctypes.util.find_library("c")
    if libc_path is None:
        return None
    libc = ctypes.CDLL(libc_path, use_errno=True)
    if not hasattr(libc, "sysctlbyname"):
        return None
    value = ctypes.c_uint64(0)
    size = ctypes.c_size_t(ctypes.sizeof(value))
    rc = libc.sysctlbyname(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0)
    return int(value.value) if rc == 0 else None
