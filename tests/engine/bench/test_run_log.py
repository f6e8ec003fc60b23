"""RunLog: each timed run starts from the same allocator state when asked to."""
import mlx.core as mx

from engine.bench.runs import RunLog


def _leave_buffers_cached():
    mx.eval(mx.zeros((1 << 18,)) + 1)       # leaves buffers in MLX's cache when it ends
    return 0.0, {"cached": mx.get_cache_memory()}


def test_a_run_log_that_clears_the_cache_starts_each_run_with_it_empty():
    seen = []
    log = RunLog(clear_cache=True)
    for _ in range(2):
        log.timed(lambda: (0.0, {"cached": mx.get_cache_memory()}), engine="t", what="x", size=1)
        seen.append(log.runs[-1].extra["cached"])
        _leave_buffers_cached()
    assert seen == [0, 0]
    mx.eval(mx.zeros((1 << 18,)) + 1)
    kept = RunLog(clear_cache=False)
    kept.timed(lambda: (0.0, {"cached": mx.get_cache_memory()}), engine="t", what="x", size=1)
    assert kept.runs[-1].extra["cached"] > 0
