"""The status panel's words (no Qt): what the telemetry numbers are and where
they came from, and a one-line summary of the engine's custom kernels."""
from __future__ import annotations

from dataclasses import dataclass

NOT_AVAILABLE = "n/a"
ON_BACKENDS = ("cuda", "metal")
SELF_TEST_MARK = "self-test"       # kernels/selftest.py's reasons start with it


def _note(text: str) -> str:
    """'n/a: no power sensor readable on this machine (nvml: …)' -> 'no power sensor readable on this machine'."""
    text = text.strip()
    if text.lower().startswith("n/a:"):
        text = text[4:].strip()
    return text.split(" (")[0].split(";")[0].strip()


@dataclass(frozen=True)
class ReadingText:
    mhz: str = NOT_AVAILABLE
    mhz_caption: str = "no telemetry"
    watts: str = NOT_AVAILABLE
    watts_caption: str = "no telemetry"
    tooltip: str = "GPU telemetry is not available in this build"
    mhz_name: str = "GPU MHz"        # the row's name: what the sampler measures
    watts_name: str = "GPU W"


def reading_text(reading) -> ReadingText:
    """'1398 MHz' / 'DVFS-weighted MHz · IOReport', '12.3 W' / 'GPU W · NVML', …"""
    if reading is None:
        return ReadingText()
    source = reading.source
    mhz_caption = f"{reading.mhz_label} · {source}"
    if reading.gpu_mhz is None and reading.reason:
        mhz_caption = f"{_note(reading.reason)} · {source}"
    if reading.gpu_watts is not None:
        watts_caption = f"{_power_label(reading)} · {source}"
    else:
        watts_caption = _note(reading.power_note) or "no power reading"
    cpu = reading.mhz_label.startswith("CPU")      # the fallback sampler: a CPU clock
    return ReadingText(reading.mhz_text, mhz_caption, reading.watts_text, watts_caption,
                       reading.tooltip, "CPU MHz" if cpu else "GPU MHz",
                       "CPU W" if cpu else "GPU W")


def _power_label(reading) -> str:
    return "CPU W" if reading.mhz_label.startswith("CPU") else "GPU W"


@dataclass(frozen=True)
class KernelText:
    line: str
    tooltip: str
    warn: bool               # a kernel the self-test turned off


def kernel_text(status: dict[str, str]) -> KernelText:
    """'kernels: 4 on (cuda)', 'kernels: reference (no GPU backend in this MLX build)',
    'kernels: 3 on (cuda), 1 disabled by self-test'."""
    if not status:
        return KernelText("kernels: none", "this engine reports no custom kernels", False)
    on = {name: s for name, s in status.items() if s in ON_BACKENDS}
    off = {name: s for name, s in status.items() if s not in ON_BACKENDS}
    failed = [name for name, s in off.items() if SELF_TEST_MARK in s]
    tooltip = "\n".join(f"{name}: {s}" + ("  ← disabled by the self-test" if name in failed
                                           else "") for name, s in status.items())
    if not on:
        reasons = {_reason(s) for s in off.values()}
        if len(reasons) == 1 and not failed:
            return KernelText(f"kernels: reference ({reasons.pop()})", tooltip, False)
    parts = []
    if on:
        parts.append(f"{len(on)} on ({'/'.join(sorted(set(on.values())))})")
    if failed:
        parts.append(f"{len(failed)} disabled by self-test")
    others = len(off) - len(failed)
    if others:
        parts.append(f"{others} reference")
    return KernelText("kernels: " + ", ".join(parts), tooltip, bool(failed))


def _reason(status: str) -> str:
    """'reference (no GPU backend in this MLX build)' -> 'no GPU backend in this MLX build'."""
    if status.startswith("reference (") and status.endswith(")"):
        return status[len("reference ("):-1]
    return status


def cpu_text(blas: dict, weights: dict) -> KernelText:
    """'CPU: dense float32 weights · Intel MKL 2026.2', or an empty line on a GPU."""
    mode = weights.get("mode", "")
    if not blas or mode == "as loaded" and weights.get("reason", "").startswith("GPU"):
        return KernelText("", "", False)
    shown = {"dense": "dense float32 weights", "quantized": "quantized weights"}
    tooltip = [f"weights: {mode} ({weights.get('reason', '')})" if mode else "",
               f"BLAS: {blas.get('name', '')} {blas.get('path', '')}".strip(),
               f"why not optimized: {blas['reason']}" if blas.get("reason") else ""]
    line = " · ".join(x for x in (shown.get(mode, ""), blas.get("name", "")) if x)
    return KernelText(f"CPU: {line}", "\n".join(t for t in tooltip if t),
                      "self-check failed" in blas.get("reason", ""))


def kv_text(used: int, total: int, page_bytes: int) -> tuple[str, str]:
    """Value and caption of the KV row: pages of the pool and the memory they are,
    the pool being the KV cache memory Settings asks for (one scratch page aside)."""
    if not total:
        return "—", "no model"
    value = f"{used} / {total} pages"
    if not page_bytes:
        return value, ""
    mb = page_bytes / (1 << 20)
    return value, f"{used * mb:.1f} of {total * mb:.0f} MB KV cache"
