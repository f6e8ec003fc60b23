"""The group's meeting point and heartbeat, beside the backend's own links.

Why: MLX's collectives cannot be cancelled or given a timeout. With MLX 0.32's ring
backend an eval waiting on a lost peer never returns (measured here: rank 0 blocks
for good in the next mx.async_eval), and ``mx.distributed.init`` waits in accept()
for good, holding the interpreter lock, when a peer never connects (a connecting
rank gives up after 5 tries, ~31 s; the accepting one never does). So a lost rank
has to be noticed elsewhere, and the ranks must meet before the ring does.

Meeting (before ``mx.distributed.init``): each follower connects to rank 0 and says
hello (a tag, its rank, the group's size); when all size-1 have, rank 0 answers each
with GO, and every rank goes on into init at about the same moment. A rank that
does not arrive within ``join_s`` ends the meeting on every rank that waits for it.

Heartbeat (from then on, on the same connections): both sides send a byte every
PERIOD_S; a closed connection (the process ended: the OS closes its sockets) is
noticed at once, a silent one (hung, or a link gone without a reset) after SILENCE_S.
``on_lost(message)`` then runs once on this thread: rank 0 fails every request and
ends its process, a follower ends its own (cluster.py).

The address: TANDEM_DIST_HEARTBEAT=host:port ("off": none), else rank 0's first ring
address (MLX_HOSTFILE) or JACCL coordinator with the port + HEARTBEAT_PORT_OFFSET.
"""
from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable

PERIOD_S = 0.5
SILENCE_S = 10.0
DEFAULT_JOIN_S = 120.0     # from the first rank's start to the last one's arrival
JOIN_ENV = "TANDEM_DIST_JOIN_S"
HEARTBEAT_PORT_OFFSET = 997
ENV = "TANDEM_DIST_HEARTBEAT"
_HELLO = struct.Struct("!4sii")          # tag, rank, size
_TAG = b"TDHB"
_GO = b"G"


def join_seconds() -> float:
    return float(os.environ.get(JOIN_ENV, DEFAULT_JOIN_S))


def heartbeat_address() -> tuple[str, int] | None:
    """(host, port) rank 0 listens on, or None where no address is known."""
    explicit = os.environ.get(ENV)
    if explicit == "off":
        return None
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


def env_rank_size() -> tuple[int, int] | None:
    """This process's (rank, size) from what mlx.launch (or mpirun) put in its
    environment, before the backend starts; None where it cannot be told."""
    try:
        if "OMPI_COMM_WORLD_RANK" in os.environ:
            return (int(os.environ["OMPI_COMM_WORLD_RANK"]),
                    int(os.environ["OMPI_COMM_WORLD_SIZE"]))
        rank = int(os.environ["MLX_RANK"])
        if os.environ.get("MLX_WORLD_SIZE"):                      # NCCL
            return rank, int(os.environ["MLX_WORLD_SIZE"])
        for name in ("MLX_HOSTFILE", "MLX_IBV_DEVICES"):          # ring, JACCL
            path = os.environ.get(name)
            if path and os.path.isfile(path):
                with open(path) as f:
                    return rank, len(json.load(f))
    except (KeyError, OSError, ValueError, TypeError):
        return None
    return None


class Heartbeat(threading.Thread):
    """Rank 0: accept size-1 followers (watching those already there), send them GO,
    then watch them all. A follower: connect, say hello, wait for GO, then watch
    rank 0. ``ready`` is set at GO; on_lost(message) is called at most once."""

    def __init__(self, rank: int, size: int, address: tuple[str, int],
                 on_lost: Callable[[str], None], silence_s: float = SILENCE_S,
                 join_s: float | None = None):
        super().__init__(name=f"tandem-heartbeat-{rank}", daemon=True)
        self.rank, self.size, self.address = rank, size, address
        self.on_lost, self.silence_s = on_lost, silence_s
        self.join_s = join_seconds() if join_s is None else join_s
        self._peers: dict[socket.socket, int] = {}       # socket -> the peer's rank
        self._seen: dict[socket.socket, float] = {}
        self._selector = selectors.DefaultSelector()     # not select(): fds past 1024
        self.ready = threading.Event()                  # the group met (GO)
        self.stopping = False          # set before a planned shutdown: a close is no loss
        self.lost_message: str | None = None
        self._server: socket.socket | None = None
        if rank == 0:                  # listening before the thread runs: no race
            self._server = socket.create_server(("", address[1]), reuse_port=False)

    def _lost(self, message: str) -> None:
        self.lost_message = message
        if not self.stopping:
            self.on_lost(message)

    def run(self) -> None:
        try:
            if self.rank == 0:
                self._meet_followers()
            else:
                self._meet_leader()
        except _Lost as e:
            return self._lost(str(e))
        except Exception as e:      # OSError, or anything: the waiting rank must hear it
            return self._lost(f"the group could not meet ({type(e).__name__}: {e})")
        self.ready.set()
        try:
            self._watch()
        except Exception as e:      # never die silently: nobody would watch any more
            self._lost(f"the heartbeat failed ({type(e).__name__}: {e})")

    # -- meeting -------------------------------------------------------------------
    def _meet_followers(self) -> None:
        deadline = time.monotonic() + self.join_s
        server = self._server
        server.setblocking(False)
        self._selector.register(server, selectors.EVENT_READ)
        while len(self._peers) < self.size - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(1, self.size)) - set(self._peers.values()))
                raise _Lost(f"rank {', '.join(map(str, missing))} did not join within "
                            f"{self.join_s:.0f} s ({JOIN_ENV})")
            for key, _ in self._selector.select(min(left, PERIOD_S)):
                if key.fileobj is server:
                    self._accept(server)
                elif not _recv(key.fileobj):
                    raise _Lost(f"rank {self._peers[key.fileobj]} left while the group met")
        self._selector.unregister(server)
        server.close()
        now = time.monotonic()
        for conn in self._peers:
            conn.sendall(_GO)
            self._seen[conn] = now      # silence counts from here, not from its hello

    def _accept(self, server: socket.socket) -> None:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return
        conn.settimeout(5.0)        # a stray client that says nothing must not stall us
        try:
            tag, rank, size = _HELLO.unpack(_read_exact(conn, _HELLO.size))
        except OSError:
            conn.close()
            return
        if tag != _TAG or size != self.size or not 0 < rank < size or rank in \
                self._peers.values():
            conn.close()            # not one of ours (another group on this port)
            return
        self._add(conn, rank)

    def _meet_leader(self) -> None:
        deadline = time.monotonic() + self.join_s
        while True:
            try:
                conn = socket.create_connection(self.address, timeout=5)
                if conn.getsockname() == conn.getpeername():
                    # Connected to itself: retrying a local port nobody listens on yet,
                    # the kernel can pick that very port as the source, and the SYN
                    # meets itself (a simultaneous open). The hello then comes back as
                    # rank 0's answer ("rank 0 left while the group met") and rank 0,
                    # once up, waits its whole join_s for this rank (a follower started
                    # 18 s before rank 0, tests/engine/distributed: once in ~20 runs).
                    # Closed with a reset, not a FIN: a self-connection closed gently
                    # holds the port for a while, and rank 0 could not listen on it.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    conn.close()
                    raise ConnectionRefusedError("connected to itself")
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise _Lost(f"rank 0 at {self.address[0]}:{self.address[1]} did not "
                                f"answer within {self.join_s:.0f} s ({e})") from None
                time.sleep(0.2)
        conn.sendall(_HELLO.pack(_TAG, self.rank, self.size))
        conn.settimeout(max(1.0, deadline - time.monotonic()))
        try:
            go = conn.recv(1)
        except TimeoutError:
            raise _Lost(f"the other ranks did not all join within {self.join_s:.0f} s "
                        f"({JOIN_ENV})") from None
        if go != _GO:
            raise _Lost("rank 0 left while the group met")
        self._add(conn, 0)

    def _add(self, conn: socket.socket, rank: int) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setblocking(False)
        self._peers[conn] = rank
        self._seen[conn] = time.monotonic()
        self._selector.register(conn, selectors.EVENT_READ)

    # -- heartbeat -----------------------------------------------------------------
    def _watch(self) -> None:
        while True:
            events = self._selector.select(PERIOD_S)
            now = time.monotonic()
            for key, _ in events:
                if not _recv(key.fileobj):
                    return self._lost(f"rank {self._peers[key.fileobj]} closed its "
                                      "connection")
                self._seen[key.fileobj] = now
            for conn, rank in self._peers.items():
                if now - self._seen[conn] > self.silence_s:
                    return self._lost(f"rank {rank} sent nothing for {self.silence_s:.0f} s")
                try:
                    conn.send(b".")
                except BlockingIOError:
                    pass                # its buffer is full: it is not reading, silence says
                except OSError:
                    return self._lost(f"rank {rank} closed its connection")


class _Lost(Exception):
    """The meeting failed: the message says which rank and why."""


def _recv(conn: socket.socket) -> bool:
    """Read what a peer sent; False when its connection closed."""
    try:
        return bool(conn.recv(64))
    except BlockingIOError:
        return True
    except OSError:
        return False


def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise OSError("a peer closed the heartbeat before saying who it is")
        data += part
    return data
