"""The cache's arrays outside the scratch page 0 and the scratch state slot.

Every padding token writes there (a padded chunk's or decode's padding rows, all to the
same few slots), and which of several writes to one place lands is unspecified on a
GPU: on the H200 two forwards of the same inputs differed there and nowhere else
(session 6, docs/bench/h200-session6-2026-12-02.txt, "diag"; session 30's chunk read in
pieces). A test comparing two caches compares them outside it."""
from __future__ import annotations

import numpy as np

from engine.core.runner import Runner


def cache_outside_scratch(runner: Runner) -> list[np.ndarray]:
    kv = [np.array(a[runner.page_size:]) for pair in runner.cache.kv for a in pair]
    states = [np.array(a[:runner.scratch_slot]) for layer in runner.cache.states for a in layer]
    return kv + states
