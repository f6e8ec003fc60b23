"""engine/bench/gc_pauses.py: the collections that ran inside a bench run, by generation,
and the longest (the bench prints them beside each decode run's slowest step)."""
import gc

from engine.bench.gc_pauses import GcPauses


def test_a_full_collection_inside_the_run_is_counted_and_timed():
    with GcPauses() as pauses:
        gc.collect()
        gc.collect(0)
    summary = pauses.summary()
    assert summary["gc_full"] == 1
    assert summary["gc_max_ms"] >= 0.0
    assert [g for g, _ in pauses.pauses].count(0) >= 1
    assert pauses._on not in gc.callbacks          # removed on exit
