"""What each rank of a distributed test runs (launched by ranks.py, one process a rank).

    python rank_main.py SCENARIO OUT_DIR

Rank 0 writes its results to OUT_DIR/result.npz (or .json); the test compares them
with the same work in one process. Started without a launcher (no MLX_RANK), it runs the
logits scenario as that one process: a reference as fresh as the ranks (no state left by
the tests the pytest process ran before, as a GPU run's measured kernel thresholds).
"""
from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))        # tests/engine

import numpy as np  # noqa: E402
import scenarios  # noqa: E402
import scenarios_disk  # noqa: E402
import scenarios_faults  # noqa: E402

from engine.distributed import cluster as dist  # noqa: E402


def main() -> int:
    name, out = sys.argv[1], Path(sys.argv[2])
    if "MLX_RANK" not in os.environ:    # no launcher: one process, the model whole
        np.savez(out / "result.npz", **scenarios.logits(None))
        return 0
    _start_as_told(int(os.environ["MLX_RANK"]))
    cluster = dist.connect("ring")         # the engine's own start-up (bounded)
    group = cluster.group
    if os.environ.get("DUMP_AFTER"):        # debugging a hang: every thread's stack
        faulthandler.dump_traceback_later(float(os.environ["DUMP_AFTER"]))
    fn = next(getattr(m, name) for m in (scenarios, scenarios_disk, scenarios_faults)
              if hasattr(m, name))
    result = fn(group) if name == "logits" else fn(group, out)
    if group.rank() == 0 and result is not None:
        np.savez(out / "result.npz", **result)
    return 0


def _start_as_told(rank: int) -> None:
    """Start-up faults: TEST_ABSENT_RANK=r never joins (a machine where Tandem was
    not started); TEST_LATE_RANK=r:s joins s seconds after the others."""
    if os.environ.get("TEST_ABSENT_RANK") == str(rank):
        sys.exit(3)
    late, _, seconds = os.environ.get("TEST_LATE_RANK", "").partition(":")
    if late == str(rank):
        import time
        time.sleep(float(seconds))


if __name__ == "__main__":
    sys.exit(main())
