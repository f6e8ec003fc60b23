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


def cpu_layout(sys_root: Path = Path("/sys/devices/system")) -> str:
    """', <n> NUMA nodes, cpufreq <governor>' where Linux says: a host-bound step's speed
    moves with the core's clock and with which node its memory is on (the same H100 host
    ran B=1 at 4.4 ms in one process and 8.1 in another, session 39); '' elsewhere."""
    parts = []
    nodes = list((sys_root / "node").glob("node[0-9]*"))     # none where there is no folder
    if nodes:
        parts.append(f"{len(nodes)} NUMA node{'s' if len(nodes) > 1 else ''}")
    try:
        governor = (sys_root / "cpu" / "cpu0" / "cpufreq" / "scaling_governor").read_text().strip()
        parts.append(f"cpufreq {governor}")
    except OSError:
        pass
    return "".join(f", {p}" for p in parts)


def host_line() -> str:
    """'# host: <CPU>, <n> CPUs[, <n> NUMA nodes, cpufreq <governor>], load average <1 min>;
    device: <the MLX device's name>'."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    device = mx.device_info().get("device_name", "?")
    return (f"# host: {cpu_model()}, {os.cpu_count()} CPUs{cpu_layout()}, load average "
            f"{load:.1f}; device: {device} ({mx.default_device()})")
