"""The order of rank 0's reaction to a lost rank (engine/distributed/cluster.py).

Session 49's H100: a 4-rank test read its reply's error and submitted again, and the
engine took the request instead of refusing it. The heartbeat thread had made the loss
visible to the engine thread (runner.broken: its next step raises and fails every
request) before it told the engine to refuse new ones. No ranks here: the cluster's
reaction alone, on stand-ins, in the order a caller could see it."""
from __future__ import annotations

import pytest

from engine.distributed import cluster as cluster_mod


class _Group:
    def rank(self):
        return 0

    def size(self):
        return 4


class _Runner:
    """Records, when the loss becomes visible to the engine thread, what the engine
    (Engine._abandon) had been told by then."""

    def __init__(self, told: list):
        self._told, self.seen_with = told, None

    @property
    def broken(self):
        return None if self.seen_with is None else "lost"

    @broken.setter
    def broken(self, message):
        self.seen_with = list(self._told)


@pytest.fixture
def lost_cluster(monkeypatch):
    monkeypatch.setattr(cluster_mod, "_exit_soon", lambda: None)   # no os._exit here
    told = []
    c = cluster_mod.Cluster(_Group(), timeout_s=3600.0)
    c.runner = _Runner(told)
    c._abandon = told.append      # what Cluster.watch installs: Engine._abandon
    return c, told


def test_the_engine_refuses_new_requests_before_its_thread_sees_the_loss(lost_cluster):
    c, told = lost_cluster
    c.lost("rank 3 closed its connection")
    assert c.runner.seen_with == told and len(told) == 1, (c.runner.seen_with, told)
    assert "rank 3 closed its connection" in told[0]


def test_a_failing_abandon_still_makes_the_loss_visible(lost_cluster, capsys):
    c, told = lost_cluster

    def failing(message):
        raise RuntimeError("a handle's queue is gone")
    c._abandon = failing
    c.lost("rank 1 stopped answering")
    assert c.runner.seen_with is not None           # the engine thread stops stepping
    assert "a handle's queue is gone" in capsys.readouterr().err


def test_a_second_loss_changes_nothing(lost_cluster):
    c, told = lost_cluster
    c.lost("rank 3 closed its connection")
    c.lost("rank 2 closed its connection")
    assert len(told) == 1 and "rank 3" in c.failure_message
