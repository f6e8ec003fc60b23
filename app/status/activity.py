"""The replies in flight and the one phase word each shows in the status panel
(no Qt). Two views meet here: the app's (a chat sent while the model loads has no
request yet; a reply whose tokens arrive streams) and the engine's, from its step
events (a request no step has admitted yet is queued; one whose prompt a step read
is reading). The panel's list, batch row and caption all read the merged phase."""
from __future__ import annotations

from dataclasses import dataclass, replace

# The phase words, in the order a reply goes through them.
WAITING_FOR_MODEL = "waiting for the model"   # the model loads: no request id yet
QUEUED = "waiting"                            # sent, not admitted by the engine yet
READING = "reading prompt"                    # the engine reads its prompt
STREAMING = "streaming"                       # its tokens arrive (the panel shows tok/s)
PHASES = (STREAMING, READING, QUEUED, WAITING_FOR_MODEL)

DEGRADED_NOTE = ("streams slowed while a prompt is read: this machine cannot keep the "
                 "reading pace beside it")


@dataclass(frozen=True)
class Activity:
    """One reply in flight (a chat's or an API request's) and what it is doing."""
    request_id: int | None        # None while it waits for the model to load
    title: str
    phase: str                    # one of PHASES; READING when only "sent" is known

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"phase {self.phase!r} is not one of {PHASES}")


def merged(activity: Activity, engine_phase: str) -> Activity:
    """`activity` with the engine's finer word: engine_phase is StepStats.phase()
    ('waiting', 'reading' or 'streaming'). The app's own word wins where it knows more:
    no request yet (the model loads), or tokens already here (streaming)."""
    if activity.request_id is None or activity.phase in (WAITING_FOR_MODEL, STREAMING):
        return activity
    phase = {"waiting": QUEUED, "reading": READING, "streaming": STREAMING}[engine_phase]
    return replace(activity, phase=phase)


def _count(activities, phase: str) -> int:
    return sum(1 for a in activities if a.phase == phase)


def batch_text(last_decode_batch: int, activities) -> tuple[int, str, str]:
    """Batch size, its value and caption, from the same phases the list shows: rows
    decode only once a reply streams (one queued or reading its prompt is not in it)."""
    streaming = _count(activities, STREAMING)
    batch = min(last_decode_batch, streaming) if streaming else 0
    parts = [f"{n} {phase}" for phase in PHASES if (n := _count(activities, phase))]
    return batch, str(batch), "decode batch · " + (" · ".join(parts) or "idle")


def activity_lines(activities, rates: dict, degraded: bool = False,
                   short=lambda t: t) -> str:
    """'Title  12.3 tok/s' per streaming reply, its phase word otherwise; 'idle'.
    Only replies in flight: a finished one leaves the list at once. The degraded
    note follows while the prefill budget runs in its degraded mode."""
    lines = []
    for a in activities:
        rate = rates.get(a.request_id, 0.0)
        lines.append(f"{short(a.title)}  " + (f"{rate:.1f} tok/s" if a.phase == STREAMING
                                               else a.phase))
    if degraded:
        lines.append(DEGRADED_NOTE)
    return "\n".join(lines) or "idle"
