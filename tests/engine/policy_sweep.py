"""The reading-pace policy over a grid of pipelined GPU shapes (not a test: a tool for
changing the policy). Each shape is a HostAndDevice run (scripted_engine.py): a calm
step, a mixed step's host time, its device time (calm + fixed + per token), how much
device work the host may queue ahead, how early the device starts, and optionally a
bimodal host (every third step waits for its own device work, as the H200's 128-token
steps did in session 25). Each runs a 2,048-token prompt alone, then three beside 7
streams, and the summary says how the TTFT ratio and the streams' gaps came out: run it
before and after a policy change (`git stash push engine/`), never as a measurement.

    .venv/bin/python tests/engine/policy_sweep.py [--each]
"""
import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripted_engine import FLOOR_S, HostAndDevice  # noqa: E402

GRID = {
    "calm_s": (0.012, 0.018),
    "mixed_host_s": (0.030, 0.045, 0.055),
    "fixed_s": (0.015, 0.030),
    "per_token_ms": (0.35, 0.45, 0.55),
    "backlog_s": (0.030, 0.060),
    "starts_at": (0.2, 0.5),
    "bimodal": (False, True),
}


def run(calm_s, mixed_host_s, fixed_s, per_token_ms, backlog_s, starts_at, bimodal, rounds=3):
    """[(TTFT / alone, longest gap, median gap, gaps over twice the floor)] a round."""
    steps_queued = [0]

    def host_s(kind, tokens):
        return {"decode": 0.9 * calm_s, "mixed": mixed_host_s}.get(kind, 0.010 + 1e-4 * tokens)

    def device_s(kind, tokens):
        if kind == "alone":
            return 0.015 + 0.00043 * tokens
        return calm_s + (fixed_s + per_token_ms * 1e-3 * tokens if kind == "mixed" else 0.0)

    def backlog(tokens):
        steps_queued[0] += 1
        if bimodal:
            return 0.005 if steps_queued[0] % 3 == 0 else backlog_s
        return 0.010 if tokens >= 256 else backlog_s

    eng = HostAndDevice(host_s, device_s, backlog, starts_at=starts_at, decode_s=calm_s,
                        prefill_tok_s=2300)
    t0 = eng.now
    eng.add(900, 2048)
    while 900 not in eng.first_token:
        eng.step()
    alone_s = eng.first_token[900] - t0
    for rid in range(7):
        eng.add(rid, (40, 120, 300)[rid % 3])
    for _ in range(30):
        eng.step()
    out = []
    for rid in range(100, 100 + rounds):
        t0 = eng.now
        gaps = sorted(sec for p, sec, _ in eng.read(rid, 2048) if p.decode)
        out.append(((eng.first_token[rid] - t0) / alone_s, gaps[-1], gaps[len(gaps) // 2],
                    sum(g > 2 * FLOOR_S + 1e-9 for g in gaps)))
        for _ in range(5):
            eng.step()
    return out


def main() -> None:
    rows = [(shape, run(*shape)) for shape in itertools.product(*GRID.values())]
    rounds = [r for _, res in rows for r in res]
    ratios = sorted(r[0] for r in rounds)
    print(f"{len(rows)} shapes, {len(rounds)} prompts: TTFT / alone median "
          f"{statistics.median(ratios):.2f}, mean {statistics.mean(ratios):.2f}, "
          f"p90 {ratios[int(0.9 * len(ratios))]:.2f}, max {ratios[-1]:.2f}; "
          f"gaps over 2 floors {sum(r[3] for r in rounds)} (in {sum(r[3] > 0 for r in rounds)} "
          f"prompts), longest {max(r[1] for r in rounds) * 1e3:.0f} ms; median gap over "
          f"the floor in {sum(r[2] > FLOOR_S + 1e-9 for r in rounds)} prompts")
    if "--each" in sys.argv:
        for shape, res in rows:
            print(dict(zip(GRID, shape)),
                  [(round(a, 2), round(b * 1e3), over) for a, b, _, over in res])


if __name__ == "__main__":
    main()
