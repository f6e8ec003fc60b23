"""The garbage collector's pauses during a bench run: how many collections of each
generation ran and the longest (a full one walks every tracked object not frozen:
engine/core/gc_freeze.py). A decode run's slowest step beside a long collection says
where that step's time went."""
from __future__ import annotations

import gc
import time


class GcPauses:
    def __init__(self):
        self.pauses: list[tuple[int, float]] = []      # (generation, seconds)
        self._t0 = 0.0

    def _on(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._t0))

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._on)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on)

    def summary(self) -> dict:
        """{'gc_full': full collections, 'gc_max_ms': the longest collection of any kind}."""
        return {"gc_full": sum(g == 2 for g, _ in self.pauses),
                "gc_max_ms": round(1e3 * max((s for _, s in self.pauses), default=0.0), 2)}
