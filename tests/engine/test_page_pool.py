import pytest

from engine.cache.page_pool import PagePool, SlotPool


def test_scratch_page_is_never_handed_out():
    pool = PagePool(num_pages=5, page_size=4)
    assert pool.num_total == 4
    assert 0 not in pool.allocate(4)
    assert not pool.can_allocate(1)


def test_free_returns_pages_and_refcounts_share():
    pool = PagePool(num_pages=9, page_size=4)
    pages = pool.allocate(3)
    pool.share(pages[:1])
    pool.free(pages)
    assert pool.num_free == 7
    pool.free(pages[:1])
    assert pool.num_free == 8
    with pytest.raises(ValueError):
        pool.free(pages[:1])


def test_pages_for_rounds_up():
    pool = PagePool(num_pages=3, page_size=16)
    assert [pool.pages_for(n) for n in (1, 16, 17)] == [1, 1, 2]


def test_slot_pool_round_trip():
    slots = SlotPool(2)
    a, b = slots.allocate(), slots.allocate()
    assert {a, b} == {0, 1} and slots.num_free == 0
    slots.free(a)
    assert slots.num_free == 1
