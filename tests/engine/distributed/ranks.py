"""Launching N local ranks of a scenario on MLX's ring backend, bounded in time.

What mlx.launch does for the ring backend on one machine, by hand so that a test
controls each process: a hostfile of 127.0.0.1 addresses, MLX_RANK and MLX_HOSTFILE
in each rank's environment, and every process killed when the time is up.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAIN = Path(__file__).with_name("rank_main.py")
HEARTBEAT_PORT_OFFSET = 997      # engine/distributed/heartbeat.py


@dataclass
class RankRun:
    codes: list[int | None]      # None: killed at the time limit
    outputs: list[str]
    wall_s: float                # from the launch until rank 0 ended

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


def run_ranks(n: int, scenario: str, out: Path, timeout_s: float = 120.0) -> RankRun:
    out.mkdir(parents=True, exist_ok=True)
    base = free_ports(n)
    hostfile = out / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{base + i}"] for i in range(n)]))
    env = {**os.environ, "MLX_HOSTFILE": str(hostfile),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("TANDEM_DIST_HEARTBEAT", None)
    logs = [open(out / f"rank{r}.log", "w+") for r in range(n)]
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(MAIN), scenario, str(out)],
                              env={**env, "MLX_RANK": str(r)}, stdout=logs[r],
                              stderr=subprocess.STDOUT, cwd=ROOT) for r in range(n)]
    codes: list[int | None] = [None] * n
    try:
        codes[0] = _wait(procs[0], timeout_s)
        wall = time.monotonic() - t0
        for r in range(1, n):         # followers end right after rank 0
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
    return RankRun(codes, outputs, wall)


def _wait(p: subprocess.Popen, timeout_s: float) -> int | None:
    try:
        return p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
