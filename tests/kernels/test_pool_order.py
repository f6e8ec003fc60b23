"""kernels/pool_order: in-place pool writes ordered once a forward (one Depends node)."""
from __future__ import annotations

import threading

import mlx.core as mx
import pytest

from kernels import pool_order


def _graph_nodes(*arrays) -> str:
    import io
    dot = io.StringIO()
    mx.export_to_dot(dot, *arrays)
    return dot.getvalue()


def test_outside_a_forward_each_write_is_ordered_by_its_own_depends():
    pool, out = mx.zeros((4, 2)), mx.ones((2,)) + 1
    (got,) = pool_order.after_write([pool], [out])
    assert got is not pool and "Depends" in _graph_nodes(got)


def test_inside_once_the_pools_come_back_and_settle_orders_them_after_the_last_array():
    a, b, c = mx.zeros((4, 2)), mx.zeros((3, 2)), mx.zeros((5,))
    cache = [[a, b], [c]]
    with pool_order.once() as order:
        first = pool_order.after_write([a, b], [mx.ones((2,)) + 1])
        second = pool_order.after_write([c], [mx.ones((2,)) + 2])
        assert first == [a, b] and second == [c]             # the same arrays: no node yet
        last = mx.ones((2,)) * 3
        order.settle(cache, last)
    assert all(x is not y for x, y in zip(cache[0] + cache[1], [a, b, c]))
    graph = _graph_nodes(*cache[0], *cache[1])
    assert graph.count('label ="Depends"') == 1 and 'label ="Multiply"' in graph


def test_a_pool_written_twice_is_ordered_once():
    a = mx.zeros((4, 2))
    cache = [[a]]
    with pool_order.once() as order:
        pool_order.after_write([a], [mx.ones((1,)) + 1])
        pool_order.after_write([a], [mx.ones((1,)) + 2])
        order.settle(cache, mx.ones((1,)) * 3)
    assert cache[0][0] is not a


def test_a_pool_missing_from_the_cache_is_an_error():
    """A write nothing would order a reader after."""
    with pool_order.once() as order:
        pool_order.after_write([mx.zeros((2,))], [mx.ones((1,))])
        with pytest.raises(RuntimeError, match="not in the cache"):
            order.settle([[mx.zeros((2,))]], mx.ones((1,)))


def test_not_deferred_is_the_usual_order_and_settle_does_nothing():
    a = mx.zeros((4, 2))
    cache = [[a]]
    with pool_order.once(deferred=False) as order:
        (got,) = pool_order.after_write([a], [mx.ones((1,)) + 1])
        order.settle(cache, mx.ones((1,)))
    assert got is not a and cache[0][0] is a


def test_the_recorder_is_per_thread():
    """Two engines run two engine threads: one's forward must not record the other's."""
    seen = []

    def other():
        seen.append(pool_order.after_write([mx.zeros((1,))], [mx.ones((1,))])[0])

    with pool_order.once():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert "Depends" in _graph_nodes(seen[0])
