"""Timed runs for the benchmark: our engine (through its public API) and the peer.

Every run records its index since the process started (run 0 is cold), the
rest before it, and the median GPU MHz and W while it ran.
"""
from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import dataclass, field

import mlx.core as mx

from engine.bench.gc_pauses import GcPauses
from engine.core.engine import Engine
from engine.events import StepEvent
from engine.sampling_params import SamplingParams


@dataclass
class Run:
    engine: str              # "tandem" or "mlx-lm"
    what: str                # "decode" or "prefill" or "load"
    size: int                # B for decode, prompt tokens for prefill
    seconds: float           # per decode step, or to the first token
    index: int = 0
    rest_s: float = 0.0
    mhz: float | None = None
    watts: float | None = None
    slowest_s: float | None = None   # decode: the slowest step of the run (seconds is the median)
    peak_gb: float | None = None     # mx.get_peak_memory while this run ran (reset before it)
    extra: dict = field(default_factory=dict)

    @property
    def tok_s(self) -> float:
        return self.size / self.seconds if self.seconds else float("nan")


SLOW_X = 2.0     # a step this many times its run's median is slow (issue 23's target)
LEAD_IN = 3      # steps before a decode run's first steady one, in the steps log


class RunLog:
    """Numbers runs and attaches the telemetry read while each ran."""

    def __init__(self, monitor=None, clear_cache: bool = False, steps_log: str | None = None,
                 stacks=None):
        self.monitor = monitor
        self.stacks = stacks              # a StackSampler of the engine thread, or None
        self.clear_cache = clear_cache
        self.steps_log = steps_log        # every decode run's steady steps, a JSON line a run
        if steps_log:
            open(steps_log, "w").close()
        self.runs: list[Run] = []
        self._last_end: float | None = None

    def timed(self, run_fn, **fields) -> Run:
        if self.clear_cache:
            mx.clear_cache()
        mx.reset_peak_memory()
        t0 = time.perf_counter()
        seconds, extra = run_fn()
        t1 = time.perf_counter()
        extra = dict(extra)
        span = extra.pop("slowest_span", None)
        records = extra.pop("step_records", None)
        lead_in = extra.pop("lead_in_records", [])
        if span is not None:
            extra["slowest_clock"] = wall_clock(span[0])
            if self.monitor is not None:
                extra["slowest_samples"] = self._samples_within(*span)
            if self.stacks is not None:
                extra["slowest_stacks"] = self.stacks.summary(*span)
        run = Run(seconds=seconds, index=len(self.runs), slowest_s=extra.pop("slowest_s", None),
                  peak_gb=mx.get_peak_memory() / 1e9, extra=extra,
                  rest_s=(t0 - self._last_end) if self._last_end else 0.0, **fields)
        run.mhz, run.watts = self._clocks(t0, t1)
        self._last_end = t1
        self.runs.append(run)
        if records is not None and self.steps_log:
            self._log_steps(run, records, lead_in)
        # One line per run as it ends, so a run cut short still leaves its numbers.
        slowest = "" if run.slowest_s is None else f", slowest step {run.slowest_s:.4f} s"
        print(f"run {run.index}: {run.engine} {run.what} {run.size}: {run.seconds:.4f} s "
              f"({run.tok_s:.1f} tok/s{slowest}) peak {run.peak_gb:.2f} GB MHz={run.mhz} "
              f"W={run.watts} {run.extra or ''}", flush=True)
        return run

    def _log_steps(self, run: Run, records: list[StepEvent],
                   lead_in: list[StepEvent]) -> None:
        """One JSON line: the run and each of its steady steps, by the wall clock (to line
        them up with what other processes log), with its queue, queue CPU and read times;
        with a stack sampler, a step over SLOW_X times the run's median also gets what the
        engine thread ran within it (StackSampler.summary). `lead_in`: the steps just
        before the first steady one (the rows joining), with their kind, rows and prompt
        tokens: what the first steady step's span waited for."""
        median = statistics.median(e.duration for e in records) if records else 0.0
        steps = [{**self._step(e), **({"stacks": self.stacks.summary(e.t_start, e.t_end)}
                                      if self.stacks is not None
                                      and e.duration > SLOW_X * median else {})}
                 for e in records]
        joined = [{"kind": e.kind, "rows": e.batch_size, "prompt_tokens": e.prefill_tokens,
                   **self._step(e)} for e in lead_in]
        with open(self.steps_log, "a") as f:
            f.write(json.dumps({"run": run.index, "engine": run.engine, "what": run.what,
                                "size": run.size, "steps": steps,
                                **({"lead_in": joined} if joined else {})}) + "\n")

    def _step(self, e: StepEvent) -> dict:
        """A step's start by the wall clock, its span, and its split (ms)."""
        return {"clock": wall_clock(e.t_start), "ms": round(1e3 * e.duration, 2),
                **{f"{name}_ms": round(1e3 * getattr(e, f"{name}_s"), 2)
                   for name in ("queue", "queue_cpu", "read")},
                **({"samples": self._samples_within(e.t_start, e.t_end)}
                   if self.monitor is not None else {})}

    def _samples_within(self, t0: float, t1: float) -> int:
        """Telemetry samples timed within [t0, t1]: whether sampling the GPU's clock and
        power (NVML on CUDA, from its own thread) coincides with the slowest step."""
        return sum(t0 <= r.t <= t1 for r in self.monitor.history(seconds=120.0))

    def _clocks(self, t0, t1):
        if self.monitor is None:
            return None, None
        self.monitor.sample_once()
        rs = [r for r in self.monitor.history(seconds=t1 - t0 + 1.0) if t0 <= r.t <= t1 + 0.3]
        mhz = [r.gpu_mhz for r in rs if r.gpu_mhz is not None]
        w = [r.gpu_watts for r in rs if r.gpu_watts is not None]
        return (statistics.median(mhz) if mhz else None,
                statistics.median(w) if w else None)


def wall_clock(t: float) -> str:
    """A time.perf_counter() reading as the wall clock's HH:MM:SS.mmm (UTC), to line a
    step up with what other processes log by the clock (the GPU machine's nvidia-smi
    poll every 5 s in ../shared/device/run-detached's gpu.csv, say)."""
    wall = time.time() - (time.perf_counter() - t)
    return time.strftime("%H:%M:%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}"


class Steps:
    """Collects the engine's StepEvents while a run is in flight."""

    def __init__(self, engine: Engine):
        self.engine, self.events, self._lock = engine, [], threading.Lock()

    def __enter__(self):
        self.engine.add_listener(self._on)
        return self

    def __exit__(self, *exc):
        self.engine.remove_listener(self._on)

    def _on(self, ev):
        if isinstance(ev, StepEvent):
            with self._lock:
                self.events.append(ev)


def steady_decode(events: list[StepEvent], batch: int) -> list[StepEvent]:
    """The steady decode steps: decode-only steps of all `batch` rows whose previous step
    was one too.

    A step's span runs from its start to the next step's start, and the step loop queues
    step n before it reads step n-1's tokens back: the span holds the wait for step n-1's
    device work. So the first step of all rows after prompt reading holds that reading
    (on the H200 a 512-token chunk alone ran 255 ms, docs/bench/HISTORY.md, against a
    ~17 ms decode step): it measures the prompt, not the decode, and is left out."""
    def full(e: StepEvent) -> bool:
        return e.kind == "decode" and e.batch_size == batch
    return [e for before, e in zip(events, events[1:]) if full(before) and full(e)]


def ours_decode(engine: Engine, prompts: list[list[int]], steps: int,
                sampling: dict | None = None):
    """Median and slowest seconds of the first `steps` steady decode steps of B rows
    (steady_decode); extra: how many there were, and the span of the first step of all
    B rows (the one left out: it holds the prompts' reading on a GPU). sampling:
    SamplingParams fields (default: greedy)."""
    B = len(prompts)
    state = process_state()
    with Steps(engine) as rec, GcPauses() as pauses:
        # Prompts are read while the first rows decode, at worst one 16-token chunk of
        # one 32-token prompt per step: the first must still run `steps` steady steps
        # after the last joins.
        engine.generate(prompts, SamplingParams(max_tokens=steps + 2 * B + 4,
                                                **(sampling or {})))
    steady = steady_decode(rec.events, B)[:steps]
    times = [e.duration for e in steady]
    start = next((i for i, e in enumerate(rec.events) if steady and e is steady[0]), 0)
    first = next((e.duration for e in rec.events if e.kind == "decode" and e.batch_size == B),
                 float("nan"))
    # Where a step's time went on the engine thread (StepEvent): queuing the next step's
    # work (and the thread's CPU time of it), and reading this one's tokens back (mostly
    # waiting for the device). A step far longer than queue + read waited elsewhere (the
    # host between steps); a queue far longer than its CPU time waited inside it.
    host = {f"{name}_ms": round(1e3 * statistics.median(getattr(e, f"{name}_s") for e in steady), 2)
            for name in ("queue", "queue_cpu", "read")} if steady else {}
    return (statistics.median(times) if times else float("nan"),
            {"steps": len(times), "slowest_s": max(times, default=float("nan")),
             "first_full_s": round(first, 4), **host, **slowest_split(steady),
             **pauses.summary(), **state, "step_records": steady,
             # The steps the rows joined in (the first steady step's span holds the last
             # one's read): the steps log keeps them beside the steady ones.
             "lead_in_records": rec.events[max(0, start - LEAD_IN):start]})


def process_state() -> dict:
    """What this process holds before a run, beside its host times: MLX's buffer cache
    (GB), Python's tracked objects outside the frozen generation (the engine freezes what
    its start made: engine/core/gc_freeze.py) and threads. Session 50's H100 showed the
    B=1 step's queue CPU time growing run by run in one process (4.4 -> 5.6 -> 6.5 ms)
    and not on the CPU backend: these say whether something grows with it."""
    import gc
    return {"mlx_cache_gb": round(mx.get_cache_memory() / 1e9, 2),
            "py_objects": len(gc.get_objects()),
            "threads": threading.active_count()}


def slowest_split(steady: list[StepEvent]) -> dict:
    """Where the slowest steady step's time went, beside the medians: which step it was
    (0 = the first steady one), its queue, queue CPU and read times, and the read of the
    step before it. A step's span runs from its start to the next step's: on a GPU, whose
    steps are pipelined, it holds its own queue and the previous step's read (the wait
    for that step's device work); its own read falls in the next span. A spike in the
    queue with the CPU time to match is the host's own work (MLX building a new CUDA graph
    executable, say); a queue far above its CPU time waited (the GIL, another thread); a
    long previous read waited for the device; a span far longer than queue + previous
    read waited between them (the step loop's own work). Its span (perf_counter seconds)
    lets RunLog count the telemetry samples taken within it, and is not printed."""
    if not steady:
        return {}
    at = max(range(len(steady)), key=lambda i: steady[i].duration)
    e = steady[at]
    before = next((p for p in steady if p.step == e.step - 1), None)
    return {"slowest_at": at, **{f"slowest_{name}_ms": round(1e3 * getattr(e, f"{name}_s"), 2)
                                 for name in ("queue", "queue_cpu", "read")},
            **({"slowest_prev_read_ms": round(1e3 * before.read_s, 2)} if before else {}),
            "slowest_span": (e.t_start, e.t_end)}


def ours_prefill(engine: Engine, prompt: list[int]):
    out = engine.generate([prompt], SamplingParams(max_tokens=1))[0]
    return out.stats.ttft_s, {}


def ours_ttft_under_load(engine: Engine, streams: list[list[int]], prompt: list[int],
                         steps: int = 48):
    """TTFT of a new prompt while len(streams) others decode, and their step times."""
    with Steps(engine) as rec:
        handles = [engine.submit(p, SamplingParams(max_tokens=steps * 4)) for p in streams]
        for h in handles:
            next(iter(h))
        # A few calm steps of the whole batch first (a fixed sleep saw none on a busy CPU).
        while sum(e.kind == "decode" and e.batch_size == len(streams)
                  for e in list(rec.events)) < 4:
            time.sleep(0.05)
        before = len(rec.events)
        new = engine.submit(prompt, SamplingParams(max_tokens=1))
        ttft = new.result().stats.ttft_s
        during_idx = len(rec.events)
        time.sleep(0.05)
        for h in handles:
            h.cancel()
            h.result()
    B = len(streams)
    calm = [e.duration for e in rec.events[:before] if e.kind == "decode" and e.batch_size == B]
    during = [e.duration for e in rec.events[before:during_idx] if e.batch_size == B]
    mixed = [e for e in rec.events[before:during_idx] if e.kind == "mixed"]
    return ttft, {"itl_before_ms": 1000 * statistics.median(calm[2:] or calm),
                  "itl_during_ms": 1000 * statistics.median(during) if during else None,
                  "itl_during_max_ms": 1000 * max(during) if during else None,
                  "chunk_tokens": statistics.median(e.prefill_tokens for e in mixed)
                  if mixed else None,
                  "degraded_steps": f"{sum(e.degraded for e in mixed)}/{len(mixed)}"}


def mixed_forward_arg(args) -> bool | None:
    """EngineConfig.mixed_forward from a bench's --no-mixed-forward / --mixed-forward
    (neither: None, the engine's own choice)."""
    return False if args.no_mixed_forward else True if args.mixed_forward else None


def add_moe_max_pairs_arg(parser) -> None:
    parser.add_argument("--moe-max-pairs", type=int, default=None,
                        help="kernels.moe_experts.MAX_PAIRS for this run: the (token, "
                             "expert) pairs up to which the gathered matrix-vector "
                             "kernel runs the experts (a decode batch's or a prompt "
                             "chunk's tuning A/B)")
    parser.add_argument("--moe-grouped-from", type=int, default=None,
                        help="kernels.moe_grouped.MIN_PAIRS for this run: the pairs from "
                             "which a prompt chunk's experts run grouped by expert (CUDA; "
                             "0: never; default: as measured at load, "
                             "kernels/moe_grouped_tune.py)")
    parser.add_argument("--moe-rows", default=None, metavar="G/D",
                        help="kernels.moe_experts.RPW1/RPW2 for this run: gate/up outputs "
                             "and down rows a warp at decode (a tuning A/B; "
                             "kernels/bench/moe_experts_ab.py --rows times them alone)")
    parser.add_argument("--moe-dedupe-from", type=int, default=None, metavar="PAIRS",
                        help="kernels.moe_experts.DEDUPE_FROM_PAIRS for this run: from this "
                             "many (token, expert) pairs a decode step's gate/up launch reads "
                             "each routed expert once for all its tokens (CUDA; default off)")
    parser.add_argument("--qmm-layout", choices=("shape", "uniform"), default=None,
                        help="kernels.qmm_rows.LAYOUT for this run: each decode "
                             "projection's layout by its shape (session 47's sweep) or "
                             "the one layout of before (CUDA; default shape)")
    for flag, (attr, value, what) in _MOE_SWITCHES.items():
        parser.add_argument(flag, action="store_true",
                            help=f"kernels.moe_experts.{attr} = {value} for this run: {what}")
    parser.add_argument("--no-pool-waits", action="store_true",
                        help="engine.core.pool_scatters.WAITS = False for this run: a "
                             "scatter into a pool is queued behind its readers and copies "
                             "the pool, as before session 47 (GPU; the A/B of the wait)")


# On/off settings of kernels/moe_experts.py for a tuning A/B: flag -> (constant, its value
# with the flag, what that does; all CUDA only)
_MOE_SWITCHES = {
    "--moe-staged": ("STAGED", True, "the decode gate/up launch copies its weight rows "
                     "into shared memory with cp.async first (default off)"),
    "--moe-staged-down": ("STAGED_DOWN", True, "the decode down launch copies its weight "
                          "rows into shared memory with cp.async before staging s * h "
                          "(default off)"),
    "--moe-pair-major": ("TILE_MAJOR", False, "the decode experts' grids pair-major, as "
                         "before session 38"),
}


def apply_moe_max_pairs(args) -> None:
    """Set kernels.moe_experts' constants (MAX_PAIRS from --moe-max-pairs, the rows a warp,
    DEDUPE_FROM_PAIRS, STAGED, STAGED_DOWN, TILE_MAJOR), kernels.moe_grouped.MIN_PAIRS from
    --moe-grouped-from and kernels.qmm_rows.LAYOUT, before a model is built
    (their kernels and applies() read them at every call)."""
    import kernels.moe_experts as moe_experts
    import kernels.moe_grouped as moe_grouped
    import kernels.qmm_rows as qmm_rows
    if args.moe_max_pairs is not None:
        moe_experts.MAX_PAIRS = args.moe_max_pairs
        moe_experts.MEASURED_RANGE = False      # the flag's range, not the load's measure
    if args.moe_grouped_from is not None:
        moe_grouped.MIN_PAIRS = args.moe_grouped_from
    if getattr(args, "moe_rows", None):
        moe_experts.RPW1, moe_experts.RPW2 = (int(r) for r in args.moe_rows.split("/"))
    if getattr(args, "moe_dedupe_from", None) is not None:
        moe_experts.DEDUPE_FROM_PAIRS = args.moe_dedupe_from
    for flag, (attr, value, _) in _MOE_SWITCHES.items():
        if getattr(args, flag.removeprefix("--").replace("-", "_"), False):
            setattr(moe_experts, attr, value)
    if getattr(args, "qmm_layout", None) is not None:
        qmm_rows.LAYOUT = args.qmm_layout
    if getattr(args, "no_pool_waits", False):
        from engine.core import pool_scatters
        pool_scatters.WAITS = False
