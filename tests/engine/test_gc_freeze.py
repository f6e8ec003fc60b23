"""engine/core/gc_freeze.py: once an engine is Ready, what is alive is frozen, so a full
collection that CPython starts during a step walks only what was made since (not the
tens of thousands of objects of the imports and the model); closing the engine gives
them back to the collector, so a closed model's reference cycles can still be freed."""
from __future__ import annotations

import gc
import threading
import weakref

from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig

# No warm-up: on a GPU it would compile in the background after Ready, and closing waits
# for the thread at most 30 s (engine.core.engine._stop_thread); the freeze does not
# depend on it.
CFG = EngineConfig(num_pages=64, page_size=4, prefill_chunk=8, max_context=200,
                   warm_up=False)


class _Cycle:
    def __init__(self):
        self.me = self


def test_a_ready_engine_leaves_collections_only_the_new_objects(tmp_path):
    # From Python 3.12 a collection moves every immortal object it meets into the
    # permanent generation too (CPython's gcmodule, update_refs), so the freeze count is
    # not 0 in a process that never froze: a bare 3.12.1 shows 375 after gc.collect(), the
    # count the H100's Python 3.12 left after close (sessions 47 and 48); 3.11 shows 0.
    # What this engine froze is measured above that floor.
    gc.collect()
    floor = gc.get_freeze_count()
    before = len(gc.get_objects())
    with Engine.load(write_tiny_llama(tmp_path / "llama", seed=3), CFG) as engine:
        frozen = gc.get_freeze_count()
        assert frozen >= before                     # the imports and the model, at least
        engine.generate(["hello world", "a second prompt"])
        # a full collection now walks what was made after Ready: a small part
        assert len(gc.get_objects()) < frozen / 4
    # closed: its thread has ended and unfrozen everything (a failure says what else runs)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not engine._thread.is_alive(), others
    gc.collect()
    assert gc.get_freeze_count() <= floor, (floor, frozen, others)


def test_a_cycle_made_before_ready_is_collected_after_close(tmp_path):
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    with Engine.load(write_tiny_llama(tmp_path / "llama", seed=3), CFG):
        del cycle
        gc.collect()
        assert alive() is not None                  # frozen: no collection walks it
    gc.collect()
    assert alive() is None
