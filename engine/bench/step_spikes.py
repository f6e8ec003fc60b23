"""Where a decode run's slow steps fell, from `engine bench --steps-log`.

    PYTHONPATH=. python -m engine.bench.step_spikes STEPS.jsonl [...] [--polls gpu.csv]
        [--over 2.0]

For each decode run: its median step, and each steady step over `--over` times it with
its place in the run, its split (queue, the engine thread's CPU time within it, read) and
the telemetry samples the bench read within it. With `--polls` (the GPU machine's
nvidia-smi log, ../shared/device/run-detached's gpu.csv: a line every 5 s, its first field
the time), also how far each slow step started from the nearest poll, beside the same
distance for every step of the run: a poll that makes a step slow shows as slow steps
near a poll while the run's steps in general are not. The issue's slowest-step target
(at most 2x the median, issue 23) is what `--over 2.0` reads.
"""
from __future__ import annotations

import argparse
import bisect
import json
import statistics
from datetime import datetime


def seconds_of_day(clock: str) -> float:
    """'HH:MM:SS.mmm' as seconds since midnight."""
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def read_polls(path: str) -> list[float]:
    """nvidia-smi's CSV lines ('2026/12/06 17:56:31.037, 1980 MHz, ...'): each poll's
    time as seconds since midnight, sorted."""
    out = []
    with open(path) as f:
        for line in f:
            stamp = line.split(",", 1)[0].strip()
            try:
                t = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f")
            except ValueError:
                continue                        # a header or a cut line
            out.append(t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6)
    return sorted(out)


def nearest_ms(t: float, polls: list[float]) -> float | None:
    """Milliseconds from t to the nearest poll (negative: the poll came after t)."""
    if not polls:
        return None
    i = bisect.bisect_left(polls, t)
    near = min(polls[max(i - 1, 0):i + 1], key=lambda p: abs(p - t))
    return round(1e3 * (t - near), 1)


def spikes(run: dict, over: float, polls: list[float]) -> dict:
    """A run's slow steps (over `over` x its median) and where they fell."""
    steps = run["steps"]
    median = statistics.median(s["ms"] for s in steps)
    slow = [{"at": i, "x": round(s["ms"] / median, 2),
             **{k: s[k] for k in ("ms", "queue_ms", "queue_cpu_ms", "read_ms")},
             # pipelined (a GPU): a step's span holds the previous step's read
             **({"prev_read_ms": steps[i - 1]["read_ms"]} if i else {}),
             **({"samples": s["samples"]} if "samples" in s else {}),
             # `engine bench --stacks`: what the engine thread ran within it
             **({"stacks": s["stacks"]} if "stacks" in s else {}),
             **({"from_poll_ms": nearest_ms(seconds_of_day(s["clock"]), polls)}
                if polls else {})}
            for i, s in enumerate(steps) if s["ms"] > over * median]
    out = {"run": run["run"], "size": run["size"], "median_ms": round(median, 2),
           "slowest_x": round(max(s["ms"] for s in steps) / median, 2), "slow": slow}
    if run.get("lead_in") and any(s["at"] == 0 for s in slow):
        # the first steady step's span holds the last of these steps' read: what it waited for
        out["lead_in"] = [{k: s[k] for k in ("kind", "rows", "prompt_tokens", "ms", "queue_ms",
                                             "read_ms")} for s in run["lead_in"]]
    if polls:
        # How near a poll a step of this run starts in general: within +-50 ms of one,
        # about 100 ms in 5 s, ~2 % of steps by chance.
        near = [abs(nearest_ms(seconds_of_day(s["clock"]), polls)) <= 50 for s in steps]
        out["steps_near_a_poll"] = f"{sum(near)}/{len(near)}"
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("logs", nargs="+", help="engine bench --steps-log files")
    p.add_argument("--polls", default=None, help="nvidia-smi's CSV log (gpu.csv)")
    p.add_argument("--over", type=float, default=2.0,
                   help="a step is slow over this many times its run's median (default 2)")
    args = p.parse_args(argv)
    polls = read_polls(args.polls) if args.polls else []
    for path in args.logs:
        with open(path) as f:
            runs = [json.loads(line) for line in f if line.strip()]
        found = [spikes(run, args.over, polls) for run in runs if run["steps"]]
        print(f"== {path}: {len(found)} decode runs, {sum(bool(r['slow']) for r in found)} "
              f"with a step over {args.over}x the median")
        for r in found:
            print(json.dumps(r))

if __name__ == "__main__":
    main()
