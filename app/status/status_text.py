"""The status panel's words (no Qt): what the telemetry numbers are and where
they came from, and a one-line summary of the engine's custom kernels."""
from __future__ import annotations

from dataclasses import dataclass

NOT_AVAILABLE = "n/a"
ON_BACKENDS = ("cuda", "metal")
SELF_TEST_MARK = "self-test"       # kernels/selftest.py's reasons start with it


def _note(text: str) -> str:
    """'n/a: no GPU power sensor on this machine (nvml: …)' -> 'no GPU power sensor on this machine'."""
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


STREAMING, READING, WAITING = "streaming", "reading prompt", "waiting for the model"


@dataclass(frozen=True)
class Activity:
    """One conversation with a reply in flight, in the words the panel uses."""
    request_id: int | None        # None while it waits for the model to load
    title: str
    phase: str                    # STREAMING, READING or WAITING


def _count(activities, phase: str) -> int:
    return sum(1 for a in activities if a.phase == phase)


def batch_text(last_decode_batch: int, activities) -> tuple[int, str, str]:
    """Batch size, its value and caption, from the same phases the list shows: rows
    decode only once a conversation streams (one reading its prompt is not in it)."""
    streaming = _count(activities, STREAMING)
    batch = min(last_decode_batch, streaming) if streaming else 0
    parts = [f"{n} {phase}" for phase, n in ((STREAMING, streaming),
                                               (READING, _count(activities, READING)),
                                               (WAITING, _count(activities, WAITING))) if n]
    return batch, str(batch), "decode batch · " + (" · ".join(parts) or "idle")


def activity_lines(activities, rates: dict, short=lambda t: t) -> str:
    """'Title  12.3 tok/s' per streaming conversation, its phase otherwise; 'idle'.
    Only replies in flight: a finished one is gone from the list at once."""
    lines = []
    for a in activities:
        rate = rates.get(a.request_id, 0.0)
        lines.append(f"{short(a.title)}  " + (f"{rate:.1f} tok/s" if a.phase == STREAMING
                                               else a.phase))
    return "\n".join(lines) or "idle"


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
