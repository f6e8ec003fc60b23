"""Steps far over their prediction: one-offs, not costs (issue 21).

A step over STALL_OVERRUN x what its own readings predicted is a one-off: a first shape
in a fresh process (PTX turned into machine code, a decode trace), a page-in. On the
H200 (session 14) such steps took 200-350 ms, and 3.4 s once, where the same chunk
length takes ~45 ms; they come while streams are admitted, mostly at the step that
ends a stream's prompt. Learned as costs they priced every chunk of the next prompt
over the floor: three of one length's five readings made its median, and degraded
mode read 512-token chunks beside the streams. The spread of ordinary steps is up to
~2.2x (CUDA graphs), so 3x tells the two apart.

Such a step is set aside, up to MAX_SET_ASIDE in a row for one key (a chunk length, or
the calm step); one more in a row is the cost itself having moved (a slower machine, a
wider batch), and is learned together with those set aside, so the estimate catches up
at once rather than after a median's worth of readings.

Plain Python (no mlx, no clock): PrefillBudget (calm steps) and ChunkReadings (chunks) ask
it what to learn.
"""
from __future__ import annotations

STALL_OVERRUN = 3.0
MAX_SET_ASIDE = 2     # that admission had two in a row at one length


def is_one_off(seconds: float, predicted_s: float | None) -> bool:
    """Whether a step of `seconds`, predicted at predicted_s, is over STALL_OVERRUN x it."""
    return bool(predicted_s) and seconds > STALL_OVERRUN * predicted_s


class OneOffSteps:
    def __init__(self):
        self._set_aside: dict[object, list[float]] = {}   # key -> readings set aside in a row

    def readings(self, key, reading: float, seconds: float,
                 predicted_s: float | None) -> list[float]:
        """What to learn of `key` from a step of `seconds` predicted at predicted_s from
        that key's own readings (reading: the value to learn): nothing where it is a
        one-off with fewer than MAX_SET_ASIDE set aside in a row before it; else the
        reading, after those set aside where it is one more of them."""
        aside = self._set_aside.pop(key, [])
        if not is_one_off(seconds, predicted_s):
            return [reading]            # within the spread: those set aside were one-offs
        if len(aside) < MAX_SET_ASIDE:
            self._set_aside[key] = aside + [reading]
            return []
        return aside + [reading]
