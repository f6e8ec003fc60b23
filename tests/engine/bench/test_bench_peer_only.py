"""`python -m engine bench --peer-only`: mlx-lm timed in a process where our engine has
closed (the separate-process half of an A/B; `--no-peer` is the other half)."""
from __future__ import annotations

import pytest

from engine.bench.__main__ import main

pytest.importorskip("mlx_lm")

TOY = ["--model", "synthetic:qwen3.5-toy", "--batch", "1,2", "--prefill", "16",
       "--steps", "2", "--rounds", "1"]


def test_peer_only_times_mlx_lm_alone(capsys):
    assert main(TOY + ["--peer-only"]) == 0
    out = capsys.readouterr().out
    assert "--peer-only: our engine closed" in out
    runs = [line for line in out.splitlines() if line.startswith("run ")]
    assert len(runs) == 3 and all(" mlx-lm " in r for r in runs)   # decode 1, 2, prefill 16


def test_peer_only_refuses_what_only_our_engine_runs():
    with pytest.raises(SystemExit, match="--peer-only"):
        main(TOY + ["--peer-only", "--ttft-load", "32"])
