"""N ranks on this machine over MLX's ring backend (tests, benchmarks), bounded in time.

What mlx.launch does for 127.0.0.1 hosts, by hand so the caller controls each
process: a hostfile of local addresses, MLX_RANK and MLX_HOSTFILE in each rank's
environment, and every process still running at the time limit killed.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from engine.distributed.heartbeat import HEARTBEAT_PORT_OFFSET


@dataclass
class RankRun:
    codes: list[int | None]      # None: killed at the time limit
    outputs: list[str]
    wall_s: float                # from the launch until rank 0 ended
    ended_at: float = 0.0        # time.monotonic() when rank 0 ended (the clock is the
                                 # system's: the ranks' own time.monotonic() compares)

    def output(self, rank: int = 0) -> str:
        return self.outputs[rank]


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> int:
    """A base port with base..base+n-1 and the heartbeat's port free."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        if all(_free(base + i) for i in range(n)) and _free(base + HEARTBEAT_PORT_OFFSET):
            return base
    raise RuntimeError("no free local ports")


def run_local(n: int, command: list[str], workdir: Path, timeout_s: float,
              env: dict | None = None, cwd: Path | None = None) -> RankRun:
    """Run `command` as ranks 0..n-1; logs and the hostfile go to workdir. Followers
    get 10 s after rank 0 ends, then everything left is killed."""
    workdir.mkdir(parents=True, exist_ok=True)
    base = free_ports(n)
    hostfile = workdir / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{base + i}"] for i in range(n)]))
    env = {**os.environ, **(env or {}), "MLX_HOSTFILE": str(hostfile)}
    env.pop("TANDEM_DIST_HEARTBEAT", None)
    logs = [open(workdir / f"rank{r}.log", "w+") for r in range(n)]
    t0 = time.monotonic()
    if n == 1:                 # one process: no group (the ring cannot make one of one)
        env.pop("MLX_HOSTFILE")
    ranks = [{"MLX_RANK": str(r)} if n > 1 else {} for r in range(n)]
    procs = [subprocess.Popen(command, env={**env, **ranks[r]}, stdout=logs[r],
                              stderr=subprocess.STDOUT, cwd=cwd) for r in range(n)]
    codes: list[int | None] = [None] * n
    try:
        codes[0] = _wait(procs[0], timeout_s)
        ended = time.monotonic()
        wall = ended - t0
        for r in range(1, n):
            codes[r] = _wait(procs[r], 10.0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
    outputs = []
    for f in logs:
        f.seek(0)
        outputs.append(f.read())
        f.close()
    return RankRun(codes, outputs, wall, ended)


def _wait(p: subprocess.Popen, timeout_s: float) -> int | None:
    try:
        return p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
