"""The meeting and the heartbeat (engine/distributed/heartbeat.py) in one process: no
mlx, threads standing in for the ranks."""
from __future__ import annotations

import queue
import socket
import time

from engine.distributed.heartbeat import Heartbeat


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, size: int, port: int, join_s: float = 10.0):
    lost: queue.Queue = queue.Queue()
    beat = Heartbeat(rank, size, ("127.0.0.1", port), lost.put, join_s=join_s)
    beat.start()
    return beat, lost


def test_the_group_meets_past_a_stray_client_then_a_closed_follower_is_lost():
    port = _port()
    leader, leader_lost = _rank(0, 3, port)
    with socket.create_connection(("127.0.0.1", port)) as stray:   # not one of ours
        stray.sendall(b"GET / HTTP/1.0\r\n\r\n")
        one, _ = _rank(1, 3, port)
        two, two_lost = _rank(2, 3, port)
        assert leader.ready.wait(10) and one.ready.wait(10) and two.ready.wait(10)
    assert leader_lost.empty()
    two.stopping = True                 # its own end is planned; rank 0's is not
    for conn in list(two._peers):
        conn.close()
    assert leader_lost.get(timeout=10) == "rank 2 closed its connection"


def test_a_rank_that_never_comes_ends_the_meeting_with_its_number():
    port = _port()
    leader, leader_lost = _rank(0, 3, port, join_s=1.0)
    # rank 1's bound is later, so rank 0's decides (with equal bounds either may first
    # report, and rank 0 then hears "rank 1 left while the group met": also right)
    one, one_lost = _rank(1, 3, port, join_s=4.0)
    assert leader_lost.get(timeout=10) == "rank 2 did not join within 1 s (TANDEM_DIST_JOIN_S)"
    assert not leader.ready.is_set()
    # rank 1 said hello and waits for GO: its own bound ends it (or rank 0's exit would)
    assert one_lost.get(timeout=10) == \
        "the other ranks did not all join within 4 s (TANDEM_DIST_JOIN_S)"


def test_a_follower_without_rank_0_says_where_it_looked():
    port = _port()
    _, lost = _rank(1, 2, port, join_s=0.5)
    assert lost.get(timeout=10).startswith(f"rank 0 at 127.0.0.1:{port} did not answer "
                                           "within 0 s")


def test_a_follower_that_connects_to_itself_tries_again(monkeypatch):
    """A follower retrying rank 0's port before rank 0 listens can be handed that very
    port as its source and connect to itself (a simultaneous open: it then read its own
    hello as rank 0's answer, and rank 0 waited its whole join_s for it). Its first try
    is made to do so here; it tries again and the group meets."""
    import engine.distributed.heartbeat as hb
    port = _port()
    real, tries = socket.create_connection, []

    def first_to_itself(address, timeout=None):
        tries.append(address)
        if len(tries) == 1:
            return real(address, timeout, source_address=address)     # meets itself
        return real(address, timeout)
    monkeypatch.setattr(hb.socket, "create_connection", first_to_itself)
    one, one_lost = _rank(1, 2, port)
    deadline = time.monotonic() + 10
    while len(tries) < 2 and one_lost.empty() and time.monotonic() < deadline:
        time.sleep(0.01)            # the first try is over (rank 0 is not listening yet)
    leader, leader_lost = _rank(0, 2, port)
    assert one.ready.wait(10) and leader.ready.wait(10), (one_lost.queue, leader_lost.queue)
