"""Helpers of the fault-injection suite: bounded subprocesses, the hang guard."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
HANG_S = 120          # a guard against hangs only; nothing here measures time


def run_script(code: str, *args: str, timeout: float = HANG_S,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run Python code in a fresh interpreter (repo on the path); a hang is a failure."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    try:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, timeout=timeout, env=full_env, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the script hung for {timeout} s: {e.stderr}")
