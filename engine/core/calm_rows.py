"""Which batch the calm step's estimate is of.

A mixed step's reading is its seconds above the calm step (engine/core/chunk_readings.py),
so the calm step must be of the same decode rows. While conversations are admitted the
batch grows a row at a time and each new prompt is read beside a batch the calm estimate
has not seen: on this 2-core CPU (session 15) a calm step took 73 ms with one stream and
~155 with three, and a 16-token chunk read beside two rows was priced at 230 ms above the
one-row calm step (its cost: ~70). That reading set the degraded mode's bound ("up to
2.25x the smallest chunk's cost"): 64-token chunks in 400 ms steps, the streams at 2.6-2.8x
their calm gap against the 2.5x promised.

So the estimate is of one batch size. Calm steps of another size are gathered until
SWITCH_READINGS of them agree on a size (their median, a one-off moves it not at all);
then the estimate is theirs. Until then mixed steps beside the new size are not readings.
"""
from __future__ import annotations

import statistics

SWITCH_READINGS = 3     # calm steps of a new batch size before the estimate is theirs


class CalmRows:
    def __init__(self):
        self.rows: int | None = None    # decode rows the calm estimate is of
        self._new_rows: int | None = None
        self._new: list[float] = []     # calm seconds at _new_rows, not yet the estimate

    def of(self, rows: int) -> bool:
        """Whether the calm estimate is of a batch of `rows` decode rows."""
        return self.rows == rows

    def calm(self, rows: int, seconds: float) -> float | None:
        """A calm step of `rows` rows took `seconds`. Returns the new estimate where this
        reading completes a switch to another batch size, else None (a reading of the
        estimate's own size, for the caller to learn, when of(rows))."""
        if self.rows is None or rows == self.rows:
            self.rows, self._new_rows, self._new = rows, None, []
            return None
        if rows != self._new_rows:
            self._new_rows, self._new = rows, []
        self._new.append(seconds)
        if len(self._new) < SWITCH_READINGS:
            return None
        self.rows, self._new_rows = rows, None
        estimate, self._new = statistics.median(self._new), []
        return estimate
