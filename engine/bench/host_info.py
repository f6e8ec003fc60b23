"""Which host a benchmark ran on: its CPU, how many cores and how busy, and its device.

A B=1 decode step on a GPU is bound by the host as much as by the card: the step's
kernels are encoded and launched from the CPU (docs/PERFORMANCE.md, "The GPU busy share
at B=1"). Session 32's H100 took 4.3 ms a greedy B=1 step with 4.1 ms of it GPU time;
session 34's H100, at the app's sampling (at most ~0.6 ms more GPU), 5.2-10.4 ms from
round to round. The bench prints this line first, so that numbers from different leases
can be told apart by their host.
"""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import mlx.core as mx


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name: Linux's /proc/cpuinfo, macOS's sysctl, else Python's."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            name = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=5).stdout.strip()
            if name:
                return name
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or "unknown CPU"


def host_line() -> str:
    """'# host: <CPU>, <n> CPUs, load average <1 min>; device: <the MLX device's name>'."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    device = mx.device_info().get("device_name", "?")
    return (f"# host: {cpu_model()}, {os.cpu_count()} CPUs, load average {load:.1f}; "
            f"device: {device} ({mx.default_device()})")
