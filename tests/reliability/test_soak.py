"""Issue 26 item 4: `python -m engine.bench.soak` for ~40 s on the tiny model (the long
run is measured by hand: docs/RELIABILITY.md). The soak itself checks that every handle
finished, the cache manager's invariants hold, every page and slot came back, RSS did
not grow after warm-up, and a fixed greedy prompt gave the same text at both ends."""
from __future__ import annotations

import json

from reliability_util import run_script

SOAK = "import sys; from engine.bench.soak import main; sys.exit(main(sys.argv[1:]))"


def test_a_short_soak_passes_every_check(tiny_folder):
    run = run_script(SOAK, "--minutes", "0.67", "--model", str(tiny_folder),
                     "--rss-every", "5", "--max-context", "256", timeout=300)
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    # a message, not a tuple: pytest elides a long tuple's middle, and with it the errors
    assert run.returncode == 0 and summary["ok"], "\n".join(
        [f"checks: {summary['checks']}", "errors:", *summary["errors"], run.stderr[-2000:]])
    counts = summary["counts"]
    # The load really mixed what the issue asks for: cancels, the context's end, refusals,
    # API streams finished and dropped, a bad API request among them.
    for what in ("finished_cancelled", "finished_length", "hit_max_context", "refused",
                 "api_done", "api_dropped"):
        assert counts.get(what, 0) > 0, (what, counts)
    assert summary["pool_emptied"]["pages_used"] == 0
    assert summary["pool_emptied"]["slots_free"] == summary["pool_emptied"]["slots_total"]
