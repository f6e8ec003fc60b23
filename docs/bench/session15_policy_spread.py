"""The reading-pace policy on session 15's H200 costs with their spread, on a scripted
clock (no engine, no timing): 20 seeds x 3 prompts of 2,048 tokens beside 7 streams.

A chunk costs 18 ms + 0.46 ms a token above a 15 ms calm step, of which its own step
holds 29 ms + 0.17 ms a token and the next step the rest (its tail); mixed steps spread
lognormally (sigma 0.09) and one in ~16 takes 1.8x. Prints how many prompts read over
1.8x their alone time, and how many had a median gap over the floor, a gap over twice
the floor, or a degraded step. Run from the repository root:

    .venv/bin/python docs/bench/session15_policy_spread.py [REPO [SEEDS]]

SEEDS: how many seeds (default 20; session 17 and 18 also ran 100). REPO (default: this checkout) is the tree whose policy runs, e.g. a worktree of an
older commit for a before/after.
"""
import random
import statistics
import sys
from pathlib import Path

repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
sys.path[:0] = [str(repo / "tests" / "engine"), str(repo)]

from test_prefill_policy_hiccups import ChunkOutlastsItsStep  # noqa: E402

from engine.core.alone_prefill_cost import OWN_FORWARD_SHARE  # noqa: E402
from engine.core.prefill_budget import PrefillBudget  # noqa: E402

FLOOR_S = 1 / 15


class Spread(ChunkOutlastsItsStep):
    def _cost(self, plan):
        s = super()._cost(plan)
        if plan.decode and plan.prefills:
            s *= random.lognormvariate(0, 0.09)
            if random.random() < 0.06:
                s *= 1.8
        elif plan.decode:
            s += random.uniform(-0.002, 0.004)
        return s


def run(seed):
    random.seed(seed)
    eng = Spread(decode_s=0.015, prefill_tok_s=1950, chunk=512, alone_fixed_s=0.005,
                 mixed_cost=lambda n: 0.018 + 0.46e-3 * n,
                 tail=lambda n: max(0.0, (0.018 + 0.46e-3 * n) - (0.029 + 0.167e-3 * n)))
    eng.budget = PrefillBudget(512, 15.0, 1.25, OWN_FORWARD_SHARE, pads_chunks=True)
    t0 = eng.now
    eng.read(99, 2048)
    alone = eng.now - t0
    eng.streams()
    for _ in range(10):
        eng.step()
    out = []
    for rid in (100, 101, 102):
        t0 = eng.now
        steps = eng.read(rid, 2048)
        gaps = [s for p, s, _ in steps if p.decode]
        out.append(((eng.first_token[rid] - t0) / alone, statistics.median(gaps), max(gaps),
                    any(a.degraded for _, _, a in steps)))
        for _ in range(4):
            eng.step()
    return out


rounds = [r for seed in range(int(sys.argv[2]) if len(sys.argv) > 2 else 20) for r in run(seed)]
ttft = sorted(r[0] for r in rounds)
print(f"TTFT ratio: median {statistics.median(ttft):.2f}x, max {ttft[-1]:.2f}x, "
      f"over 1.8x in {sum(t > 1.8 for t in ttft)} of {len(ttft)} prompts")
print(f"median gap over the floor: {sum(r[1] > FLOOR_S for r in rounds)}, a gap over twice "
      f"the floor: {sum(r[2] > 2 * FLOOR_S for r in rounds)}, a degraded step: "
      f"{sum(r[3] for r in rounds)} (of {len(rounds)} prompts)")
