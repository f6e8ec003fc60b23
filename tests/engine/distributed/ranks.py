"""Launching N local ranks of a scenario (rank_main.py) on the ring backend, bounded."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engine.distributed.local import RankRun, run_local

ROOT = Path(__file__).resolve().parents[3]
MAIN = Path(__file__).with_name("rank_main.py")


def run_ranks(n: int, scenario: str, out: Path, timeout_s: float = 120.0,
              env: dict | None = None) -> RankRun:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return run_local(n, [sys.executable, str(MAIN), scenario, str(out)], out, timeout_s,
                     env={"PYTHONPATH": path, **(env or {})}, cwd=ROOT)


def run_alone(scenario: str, out: Path, timeout_s: float = 120.0) -> None:
    """The scenario in one fresh process, the model whole (rank_main.py without a
    launcher): its result.npz in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(MAIN), scenario, str(out)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": path}, timeout=timeout_s,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]


def every_log(run: RankRun, tail: int = 2500) -> str:
    """Each rank's exit status and the end of its log (what a failed test shows)."""
    return "\n".join(f"--- rank {r} (exit {code}):\n{out[-tail:]}"
                     for r, (code, out) in enumerate(zip(run.codes, run.outputs)))
