"""A heartbeat between rank 0 and every follower, beside the backend's own links.

Why: when a peer dies while collectives are in flight, MLX 0.32's ring backend logs
"Failing pending tasks" but the waiting eval never returns (measured here: rank 0
blocks for good in the next mx.async_eval). MLX collectives cannot be cancelled or
given a timeout, so a lost rank has to be noticed elsewhere. Each follower keeps a
TCP connection to rank 0 and both sides send a byte every PERIOD_S; a closed
connection (the process ended: the OS closes its sockets) is noticed at once, a
silent one (hung, or a link gone without a reset) after SILENCE_S. Then ``on_lost``
runs on the heartbeat's thread: rank 0 fails every request and ends its process,
a follower ends its own (cluster.py).

The address: TANDEM_DIST_HEARTBEAT=host:port, else rank 0's first ring address
(MLX_HOSTFILE) or JACCL coordinator with the port + HEARTBEAT_PORT_OFFSET. Without
one, only the watchdog's timeout guards (cluster.Watchdog).
"""
from __future__ import annotations

import json
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

PERIOD_S = 0.5
SILENCE_S = 10.0
CONNECT_S = 120.0            # followers may load their shard well before rank 0 listens
HEARTBEAT_PORT_OFFSET = 997
ENV = "TANDEM_DIST_HEARTBEAT"


def heartbeat_address() -> tuple[str, int] | None:
    """(host, port) rank 0 listens on, or None where no address is known."""
    explicit = os.environ.get(ENV)
    if explicit:
        host, port = explicit.rsplit(":", 1)
        return host, int(port)
    try:
        hostfile = os.environ.get("MLX_HOSTFILE")
        if hostfile and os.path.isfile(hostfile):
            with open(hostfile) as f:
                host, port = json.load(f)[0][0].rsplit(":", 1)
            return host, int(port) + HEARTBEAT_PORT_OFFSET
        coordinator = os.environ.get("MLX_JACCL_COORDINATOR")
        if coordinator:
            host, port = coordinator.rsplit(":", 1)
            return host, int(port) + HEARTBEAT_PORT_OFFSET
    except (OSError, ValueError, IndexError, TypeError):
        return None
    return None


class Heartbeat(threading.Thread):
    """Rank 0: accept size-1 followers, then watch them all. A follower: connect, then
    watch rank 0. on_lost(message) is called once, on this thread."""

    def __init__(self, rank: int, size: int, address: tuple[str, int],
                 on_lost: Callable[[str], None], silence_s: float = SILENCE_S):
        super().__init__(name=f"tandem-heartbeat-{rank}", daemon=True)
        self.rank, self.size, self.address = rank, size, address
        self.on_lost, self.silence_s = on_lost, silence_s
        self._peers: dict[socket.socket, int] = {}       # socket -> the peer's rank
        self._seen: dict[socket.socket, float] = {}
        self.ready = threading.Event()                  # every peer connected
        self.stopping = False          # set before a planned shutdown: a close is no loss

    def _lost(self, message: str) -> None:
        if not self.stopping:
            self.on_lost(message)

    def run(self) -> None:
        try:
            self._connect()
        except OSError as e:
            return self._lost(f"the heartbeat could not connect ({e})")
        self.ready.set()
        self._watch()

    def _connect(self) -> None:
        if self.rank == 0:
            server = socket.create_server(("", self.address[1]), reuse_port=False)
            server.settimeout(CONNECT_S)
            with server:
                while len(self._peers) < self.size - 1:
                    conn, _ = server.accept()
                    self._add(conn, struct.unpack("!i", _read_exact(conn, 4))[0])
            return
        deadline = time.monotonic() + CONNECT_S
        while True:
            try:
                conn = socket.create_connection(self.address, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        conn.sendall(struct.pack("!i", self.rank))
        self._add(conn, 0)

    def _add(self, conn: socket.socket, rank: int) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setblocking(False)
        self._peers[conn] = rank
        self._seen[conn] = time.monotonic()

    def _watch(self) -> None:
        while True:
            readable, _, _ = select.select(list(self._peers), [], [], PERIOD_S)
            now = time.monotonic()
            for conn in readable:
                try:
                    data = conn.recv(64)
                except OSError:
                    data = b""
                if not data:
                    return self._lost(f"rank {self._peers[conn]} closed its connection")
                self._seen[conn] = now
            for conn, rank in self._peers.items():
                if now - self._seen[conn] > self.silence_s:
                    return self._lost(f"rank {rank} sent nothing for {self.silence_s:.0f} s")
                try:
                    conn.send(b".")
                except BlockingIOError:
                    pass                # its buffer is full: it is not reading, silence says
                except OSError:
                    return self._lost(f"rank {rank} closed its connection")


def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise OSError("a follower closed the heartbeat before saying its rank")
        data += part
    return data
