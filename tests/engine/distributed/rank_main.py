"""What each rank of a distributed test runs (launched by ranks.py, one process a rank).

    python rank_main.py SCENARIO OUT_DIR

Rank 0 writes its results to OUT_DIR/result.npz (or .json); the test compares them
with the same work in one process.
"""
from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))        # tests/engine

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import scenarios  # noqa: E402


def main() -> int:
    name, out = sys.argv[1], Path(sys.argv[2])
    group = mx.distributed.init(backend="ring", strict=True)
    if os.environ.get("DUMP_AFTER"):        # debugging a hang: every thread's stack
        faulthandler.dump_traceback_later(float(os.environ["DUMP_AFTER"]))
    fn = getattr(scenarios, name)
    result = fn(group) if name == "logits" else fn(group, out)
    if group.rank() == 0 and result is not None:
        np.savez(out / "result.npz", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
