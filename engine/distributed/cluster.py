"""The process's group and the engine's hooks into it.

A process started by ``mlx.launch`` (or ``python -m engine ... --hosts hosts.json``,
which re-runs itself under mlx.launch) joins the group with ``connect``: the ranks
meet on the heartbeat first (heartbeat.py), then start the backend. Rank 0 builds its
Engine as usual: the engine asks ``current_cluster()`` and, when there is one, loads
its shard (``load_bundle``), runs a LeaderRunner (``make_runner``), opens the disk
cache for files of every rank's part (``disk_opener``), and sends the shutdown
message when it closes. Every other rank loads its shard and runs ``follow`` until then.

Failures. MLX's collectives cannot be cancelled, and with the ring backend an eval
waiting on a lost peer never returns (heartbeat.py). So a lost rank is noticed beside
them: by the heartbeat (a process that ended: at once; a silent one: after
heartbeat.SILENCE_S) or by the Watchdog (work waiting and no step sent for
``timeout_s``). Rank 0 then fails every request with a message that says so (the
engine thread stays blocked in the collective for good), and ends its process
EXIT_GRACE_S later with EXIT_LOST; a follower ends at once. Restarting every rank is
the recovery. Errors the backend does raise (a peer gone before a collective
starts) end the group the same way (``failed``).

Bounds that hold even where a C call keeps the interpreter lock (``mx.distributed
.init`` waiting in accept() for a rank that never comes does): start-up is bounded
by heartbeat.join_seconds() and the exit after a loss by EXIT_GRACE_S + 3 s, both
by faulthandler's watchdog, a C thread that ends the process (status 1) without
the lock.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx

from engine.config import EngineConfig
from engine.distributed.disk_parts import joined_schema
from engine.distributed.follower import follow
from engine.distributed.heartbeat import Heartbeat, env_rank_size, heartbeat_address, join_seconds
from engine.distributed.leader import ClusterError, LeaderRunner
from engine.distributed.sharding import load_sharded, shard_model
from engine.distributed.wire import Wire
from engine.events import LoadProgress

DEFAULT_TIMEOUT_S = 120.0        # a step of a big prefill on a slow link stays well under
TIMEOUT_ENV = "TANDEM_DIST_TIMEOUT_S"
EXIT_LOST = 75
EXIT_GRACE_S = 2.0               # for the failed requests' events to reach their readers
BACKSTOP_S = 3.0                 # then faulthandler's C thread, if os._exit could not run

_current: Cluster | None = None      # the engine's group (join)
_process: Cluster | None = None      # the group this process joined (connect)


def current_cluster() -> Cluster | None:
    """The group the engine runs over (join()), or None: one process, no sharding."""
    return _current


def process_cluster() -> Cluster | None:
    """The group this process joined with connect(), or None."""
    return _process


def join(cluster: Cluster | None) -> None:
    """Make cluster the group rank 0's next Engine runs over (None: one process)."""
    global _current
    _current = cluster


def connect(backend: str = "any") -> Cluster | None:
    """Join the group of a process launched by mlx.launch (MLX_RANK set); None alone.

    The ranks meet on the heartbeat before the backend starts, so they enter
    mx.distributed.init together; a rank that does not come ends every other within
    heartbeat.join_seconds() with a message saying which (heartbeat.py)."""
    global _process
    if "MLX_RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ:
        return None
    beat = _meet()
    group = _init_within_join_bound(backend)
    if group.size() == 1:
        return None
    _process = Cluster(group, heartbeat=beat)
    return _process


def _meet() -> Heartbeat | None:
    """The heartbeat, once every rank has arrived (None where no address is known)."""
    rank_size, address = env_rank_size(), heartbeat_address()
    if rank_size is None or address is None or rank_size[1] < 2:
        return None
    rank, size = rank_size
    try:
        beat = Heartbeat(rank, size, address, _lost_while_joining)
    except OSError as e:
        _lost_while_joining(f"rank 0 cannot listen on port {address[1]} ({e})")
    beat.start()
    # The heartbeat ends the process if the meeting fails (bounded by its join_s).
    if not beat.ready.wait(beat.join_s + 30):
        _lost_while_joining("the meeting on the heartbeat did not end")
    return beat


def _init_within_join_bound(backend: str):
    # The ring's init waits in accept() without a timeout and holds the interpreter
    # lock: no Python thread could end it. faulthandler's watchdog is a C thread.
    faulthandler.dump_traceback_later(join_seconds(), exit=True)
    try:
        return mx.distributed.init(strict=True, backend=backend)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _lost_while_joining(why: str) -> None:
    rank = (env_rank_size() or ("?",))[0]
    print(f"tandem rank {rank}: the group did not start: {why}. Start every machine's "
          f"process (stopping, exit {EXIT_LOST}).", file=sys.stderr, flush=True)
    os._exit(EXIT_LOST)


class Cluster:
    def __init__(self, group, timeout_s: float | None = None,
                 heartbeat: Heartbeat | None = None):
        self.group = group
        self.timeout_s = timeout_s or float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
        self.runner: LeaderRunner | None = None
        self.failure_message: str | None = None
        self.heartbeat = heartbeat
        self._abandon: Callable[[str], None] | None = None
        self._lost_once = threading.Lock()
        if heartbeat is not None:     # from now on a loss ends this process as a member
            heartbeat.on_lost = self.lost if self.rank == 0 else _follower_lost
            if heartbeat.lost_message is not None:       # lost before the swap
                heartbeat.on_lost(heartbeat.lost_message)

    @property
    def rank(self) -> int:
        return self.group.rank()

    @property
    def size(self) -> int:
        return self.group.size()

    # -- the engine's hooks ------------------------------------------------------
    def load_bundle(self, model, config: EngineConfig,
                    on_progress: Callable[[LoadProgress], None] | None = None,
                    quantize_bits: int | None = None):
        """model_bundle.load_bundle for this rank's shard."""
        return load_shard_bundle(model, config, self.group, on_progress, quantize_bits)

    def disk_opener(self, opener: Callable[[dict], object]) -> Callable[[dict], object]:
        """The engine's disk cache opener, for files holding every rank's part."""
        return lambda schema: opener(joined_schema(schema, self.size))

    def make_runner(self, model, config: EngineConfig, num_pages: int) -> LeaderRunner:
        self.runner = LeaderRunner(model, config, num_pages, Wire(self.group))
        return self.runner

    def watch(self, has_work: Callable[[], bool], abandon: Callable[[str], None]) -> None:
        """Rank 0, once its engine runs: start the watchdog (the heartbeat runs since
        connect). abandon(message) fails every request from their thread
        (Engine._abandon)."""
        self._abandon = abandon
        if self.failure_message is not None:    # lost while the engine was loading
            abandon(self.failure_message)
        Watchdog(self, has_work).start()

    def lost(self, why: str) -> None:
        """A rank is gone (heartbeat, watchdog or engine thread): fail everything, stop."""
        if not self._lost_once.acquire(blocking=False):
            return
        message = (f"A machine of the group ({self.size} ranks) stopped answering: {why}. "
                   "Restart Tandem on every machine.")
        self.failure_message = message
        print(f"tandem: {message} This process stops (exit {EXIT_LOST}).", file=sys.stderr,
              flush=True)
        _exit_soon()            # first: a failing reader below must not keep us alive
        try:
            if self._abandon is not None:
                self._abandon(message)
        except Exception:
            traceback.print_exc()
        finally:
            # Only now may the engine thread see the loss (its next step raises
            # ClusterError and fails its requests): the engine already refuses new
            # ones, so a caller that reads a request's error and submits again is
            # refused, not left waiting for the exit (session 49's H100: the heartbeat
            # thread set this first, and a 4-rank test's submit raced the refusal).
            if self.runner is not None:
                self.runner.broken = message

    def failed(self, error: BaseException) -> bool:
        """After a step raised: True when the group is broken (a lost rank), and then
        every later step raises ClusterError at once instead of waiting."""
        if isinstance(error, ClusterError):
            return True
        if self.runner is None or not _is_backend_error(error):
            return False
        self.lost(f"the backend said: {error}")
        return True

    def shutdown(self) -> None:
        """Rank 0's engine closes: the followers stop (a closed heartbeat is no loss)."""
        self.done()
        if self.runner is not None:
            self.runner.close()

    def done(self) -> None:
        """This process's planned end: the peers' closing connections are no loss."""
        if self.heartbeat is not None:
            self.heartbeat.stopping = True


def _exit_soon() -> None:
    """os._exit(EXIT_LOST) after EXIT_GRACE_S; BACKSTOP_S later, status 1 from a C thread
    where os._exit could not run (a C call holding the interpreter lock for good)."""
    threading.Timer(EXIT_GRACE_S, os._exit, (EXIT_LOST,)).start()
    faulthandler.dump_traceback_later(EXIT_GRACE_S + BACKSTOP_S, exit=True)


class Watchdog(threading.Thread):
    """Ends the process when the engine has work but no step went out for timeout_s."""

    def __init__(self, cluster: Cluster, has_work: Callable[[], bool]):
        super().__init__(name="tandem-dist-watchdog", daemon=True)
        self.cluster, self.has_work = cluster, has_work

    def run(self) -> None:
        runner, limit = self.cluster.runner, self.cluster.timeout_s
        busy_since = None           # when the engine last went from idle to having work
        while runner.broken is None:
            time.sleep(min(1.0, limit / 4))
            now = time.monotonic()
            if not self.has_work():
                busy_since = None
                continue
            busy_since = busy_since or now
            silent = now - max(runner.last_sent, busy_since)
            if silent > limit:
                return self.cluster.lost(f"no step went out for {silent:.0f} s")


def _is_backend_error(error: BaseException) -> bool:
    """The backends' own errors: "[ring] connection to a peer was lost", JACCL's, NCCL's,
    MPI's (RuntimeError with the backend's name)."""
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(
        name in text for name in ("[ring]", "jaccl", "nccl", "mpi", "distributed"))


def load_shard_bundle(model, config: EngineConfig, group,
                      on_progress: Callable[[LoadProgress], None] | None = None,
                      quantize_bits: int | None = None):
    """This rank's shard with its tokenizer, projections joined and kernels checked, as
    model_bundle.load_bundle does for a whole model."""
    from engine.loading import cpu_dense, cpu_layout, cuda_qmm_guard
    from engine.loading.default_model import default_model_path
    from engine.loading.model_bundle import (
        InMemoryModel,
        ModelBundle,
        _give_kernels,
        _in_memory_bundle,
        start_kernel_seeding,
    )
    from engine.models.base import fuse_projections
    from engine.tokenization.tokenizer import Tokenizer
    report = on_progress or (lambda p: None)
    start_kernel_seeding()
    if quantize_bits:
        raise ClusterError("quantize-on-load is not supported with several ranks; use an "
                           "MLX (already quantized) folder")
    if isinstance(model, InMemoryModel):
        local = InMemoryModel(shard_model(model.model, group), model.tokenizer, model.config,
                              model.name)
        return _in_memory_bundle(local, config, report)
    path = Path(model).expanduser() if model is not None else default_model_path()
    report(LoadProgress(0.05, f"Reading rank {group.rank()}'s shard of {path.name}"))
    loaded = load_sharded(path, group)
    weights = cpu_dense.apply(loaded.model, config.cpu_weights)
    tokenizer = Tokenizer.from_folder(path)
    fuse_projections(loaded.model)
    cuda_qmm_guard.apply(loaded.model)
    cpu_layout.arrange(loaded.model)
    report(LoadProgress(0.88, "Checking kernels"))
    kernels, note, prewarmed = _give_kernels(loaded.model, config, report)
    return ModelBundle(loaded.model, tokenizer, loaded.config, path, path.name, kernels,
                       weights.as_dict(), experts_note=note, prewarm_note=prewarmed)


def run_follower(model, config: EngineConfig, cluster: Cluster) -> int:
    """A follower process's whole life: load its shard, follow rank 0 (the heartbeat
    ends the process when rank 0 is lost). Ctrl-C in the terminal reaches every local
    rank: a follower ignores it and stops when rank 0 says so."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    bundle = load_shard_bundle(model, config, cluster.group)
    code = follow(bundle.model, config, cluster.group)
    cluster.done()
    return EXIT_LOST if code else 0       # the backend raised: the group is lost


def _follower_lost(why: str) -> None:
    print(f"tandem follower: rank 0 is lost ({why}); stopping (exit {EXIT_LOST}).",
          file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(BACKSTOP_S, exit=True)
    os._exit(EXIT_LOST)
