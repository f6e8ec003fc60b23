"""A soak: hours (or a minute) of mixed use, then checks that nothing leaked.

    python -m engine.bench.soak --minutes 30 [--model PATH] [--threads 4] [--api-streams 2]

Four threads submit random prompts (text, messages, token ids, follow-up turns, some
longer than the context, some running to its end) with random valid sampling settings
and random cancels; API clients stream through the HTTP server, some dropping the
connection mid-stream. The pool is small, so preemption happens too. At the end:

- every request handle finished, no request ended "error";
- the cache manager's invariants hold, no request is left, and once the kept turns are
  dropped every page and state slot is free;
- resident memory, sampled every --rss-every seconds, did not grow after warm-up (the
  first third of the run) by more than max(32 MB, 5 %);
- a fixed greedy prompt gives the same text at the start and at the end.

Prints one JSON summary line last; exit status 0 when every check held, 1 otherwise.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

from engine.bench.engine_probe import ProbeEngine, drop_kept_turns, pool_state
from engine.bench.soak_load import Tally, api_worker, engine_worker
from engine.config import EngineConfig
from engine.sampling_params import SamplingParams

FIXED = "Once upon a time, in a quiet village by the sea,"
GREEDY = SamplingParams(max_tokens=32, temperature=0.0)
MB = 1 << 20


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine.bench.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, required=True)
    p.add_argument("--model", default=None, help="model folder or .gguf (default: built-in)")
    p.add_argument("--threads", type=int, default=4, help="engine submitters")
    p.add_argument("--api-streams", type=int, default=2, help="HTTP streaming clients")
    p.add_argument("--max-context", type=int, default=512)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--rss-every", type=float, default=30.0, metavar="S")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-disk-cache", action="store_true",
                   help="without a --cache-dir (default: a temporary folder, 64 MB)")
    return p.parse_args(argv)


def engine_config(args, cache_dir: str | None) -> EngineConfig:
    # Half the pages every sequence at full context would need: preemption happens.
    pages = args.max_num_seqs * (args.max_context // 16) // 2 + 1
    return EngineConfig(max_num_seqs=args.max_num_seqs, max_context=args.max_context,
                        page_size=16, num_pages=pages, prefill_chunk=128,
                        cache_dir=cache_dir, disk_cache_mb=64)


class RssSampler(threading.Thread):
    def __init__(self, every: float):
        super().__init__(name="soak-rss", daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while True:
            self.samples.append((round(time.monotonic() - self.t0, 1), round(rss_mb(), 1)))
            if self.stop.wait(self.every):
                self.samples.append((round(time.monotonic() - self.t0, 1), round(rss_mb(), 1)))
                return


def rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass                             # macOS: the peak so far
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MB if sys.platform == "darwin" else peak / 1024


def rss_check(samples: list[tuple[float, float]]) -> dict:
    """Growth after warm-up: the last sample against the one that ends the first third."""
    if len(samples) < 3:
        return {"ok": True, "note": "too few samples to judge", "samples": samples}
    base = samples[max(1, len(samples) // 3)][1]
    growth = samples[-1][1] - base
    allowed = max(32.0, 0.05 * base)
    return {"ok": growth <= allowed, "after_warm_up_mb": base, "last_mb": samples[-1][1],
            "growth_mb": round(growth, 1), "allowed_mb": round(allowed, 1),
            "samples": samples}


class ServerThread:
    """The API server over the soak's engine, on an asyncio loop of its own."""

    def __init__(self, engine):
        from engine.server import ApiServer, EngineHolder, ServerConfig
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ApiServer(EngineHolder(engine=engine, loading=False),
                                ServerConfig(port=0, client_timeout_s=30))
        self._call(self.server.start())
        self.port = self.server.port

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self._call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="tandem-soak-") as tmp:
        cache_dir = None if args.no_disk_cache else tmp
        engine = ProbeEngine.load(args.model, engine_config(args, cache_dir))
        try:
            return _soak(engine, args)
        finally:
            engine.close()


def _soak(engine: ProbeEngine, args) -> dict:
    fixed_start = engine.generate([FIXED], GREEDY)[0].text
    sampler = RssSampler(args.rss_every)
    sampler.start()
    server = ServerThread(engine) if args.api_streams else None
    tally = Tally()
    deadline = time.monotonic() + args.minutes * 60
    workers = [threading.Thread(target=engine_worker, args=(engine, args.seed + i, deadline,
                                                            tally)) for i in range(args.threads)]
    if server:
        workers += [threading.Thread(target=api_worker, args=(server.port, 1000 + args.seed + i,
                                                              deadline, tally))
                    for i in range(args.api_streams)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(args.minutes * 60 + 300)
    if server:
        server.close()
    unfinished = [h.request_id for h in list(tally.open) if _wait_finished(h) is None]
    state = engine.probe(pool_state)
    emptied = _drop_kept_turns(engine)
    fixed_end = engine.generate([FIXED], GREEDY)[0].text
    sampler.stop.set()
    sampler.join(10)
    return _summary(args, tally, unfinished, state, emptied, fixed_start, fixed_end,
                    rss_check(sampler.samples), hung=[w.name for w in workers if w.is_alive()])


def _wait_finished(handle, timeout: float = 60.0):
    try:
        handle.result(timeout)
    except TimeoutError:
        pass
    return handle.finished


def _drop_kept_turns(engine: ProbeEngine) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = engine.probe(drop_kept_turns)
        if state is not None:
            return state
        time.sleep(0.05)
    return {"busy": True}


def _summary(args, tally, unfinished, state, emptied, fixed_start, fixed_end, rss, hung):
    checks = {
        "every_handle_finished": not unfinished,
        "no_request_error": not tally.errors,
        "no_request_left": state["requests"] == state["running"] == state["waiting"] == 0,
        "invariants_hold": True,            # pool_state raised otherwise
        "pool_back_to_full": (emptied.get("pages_used") == 0
                              and emptied.get("slots_free") == emptied.get("slots_total")),
        "rss_flat_after_warm_up": rss["ok"],
        "fixed_prompt_same": fixed_start == fixed_end,
        "no_worker_hung": not hung,
    }
    return {"ok": all(checks.values()), "checks": checks, "minutes": args.minutes,
            "threads": args.threads, "api_streams": args.api_streams,
            "counts": dict(tally.counts), "errors": tally.errors[:10],
            "unfinished": unfinished[:10], "pool_at_end": state, "pool_emptied": emptied,
            "rss": rss, "fixed_text": fixed_start, "fixed_text_end": fixed_end}


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    summary = run(args)
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    for name, ok in summary["checks"].items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}", file=sys.stderr)
    c = summary["counts"]
    print(f"{sum(v for k, v in c.items() if k.startswith('finished_'))} requests, "
          f"{c.get('tokens', 0)} tokens, {c.get('api_done', 0)} API streams done, "
          f"{c.get('api_dropped', 0)} dropped; RSS {summary['rss'].get('after_warm_up_mb')}"
          f" -> {summary['rss'].get('last_mb')} MB", file=sys.stderr)
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    import atexit

    from engine.core.mlx_threads import clear_thread_streams
    atexit.register(clear_thread_streams)
    sys.exit(main())
