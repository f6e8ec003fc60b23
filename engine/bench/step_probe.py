"""Where a decode step's host time goes, part by part (for engine/bench/grammar_cost.py).

While installed (swapped in while the engine is idle between rounds), it wraps the
engine's own functions, which the engine thread calls, and keeps for each decode step of
the full batch the host milliseconds from the start of its queuing to the next one's:

  build fwd    Runner.decode: building the decode forward (a compiled replay, or the
               graph in Python)
  queue early  the sampler's mx.async_eval (a batch with a grammar row queues its
               forward before feed_early waits)
  queue rest   the step loop's mx.async_eval calls (the sampling, or the whole step);
               MLX's CUDA eval also blocks in these while 10 graphs are in flight
               (back-pressure), so device time can show up in both queue columns
  wait         SampleTracker.feed_early less the grammar's accept: waiting for the
               previous step's tokens
  mask, accept the grammar's fill_mask and accept (llguidance), from its counters
  sampling     the rest of sample_batch: the sampling graph, the mask's upload
  read back    StepLoop._complete of the step before: waiting for its tokens, handing
               them out (a grammar's confirm included)
  other        the rest of the period: planning, events, bookkeeping

and whether the step's forward had been queued when the wait began. On a GPU, a wait or
a read back about as long as a forward means the host waited for work queued after the
tokens it needed (the next forward), and the device idled while the host went on.
"""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

PARTS = ("build fwd", "queue early", "queue rest", "wait", "mask", "accept", "sampling",
         "read back", "other")
QUEUED_FIRST = "fwd queued at wait"


def medians_ms(steps: list[dict]) -> dict:
    """part -> median ms over StepProbe.steps (of one or more rounds); QUEUED_FIRST -> the
    share of the steps with a wait whose forward was queued first, or None (no wait)."""
    out = {p: 1e3 * statistics.median(s[p] for s in steps) if steps else 0.0 for p in PARTS}
    flags = [s[QUEUED_FIRST] for s in steps if s[QUEUED_FIRST] is not None]
    out[QUEUED_FIRST] = sum(flags) / len(flags) if flags else None
    return out


class _TimedMx:
    """mlx.core as one engine module sees it, its async_eval timed into `part` of the
    probe's step; drop: not run at all (the "-sync" setups' sampler, which queued nothing
    before the wait)."""

    def __init__(self, mx, probe: StepProbe, part: str, drop: bool = False):
        self._mx, self._probe, self._part, self._drop = mx, probe, part, drop

    def __getattr__(self, name):
        return getattr(self._mx, name)

    def async_eval(self, *arrays) -> None:
        if self._drop:
            return
        t = time.perf_counter()
        self._mx.async_eval(*arrays)
        self._probe.add(self._part, time.perf_counter() - t)
        if self._part == "queue early":
            self._probe.forward_queued = True


class StepProbe:
    """Per full-batch decode step: part -> seconds, and QUEUED_FIRST (None: no wait)."""

    def __init__(self, batch: int, grammar=None):
        """grammar: the round's TimedGrammar (mask_s, accept_s counters), or None."""
        self.batch = batch
        self.grammar = grammar
        self.steps: list[dict] = []
        self.forward_queued = False
        self._step: dict | None = None
        self._start = (0.0, 0.0, 0.0)      # (time, grammar mask_s, accept_s)

    def add(self, part: str, seconds: float) -> None:
        if self._step is not None:
            self._step[part] = self._step.get(part, 0.0) + seconds

    def _begin(self, plan) -> None:
        self._end()
        self._start = (time.perf_counter(), *self._grammar_counts())
        full = len(plan.decode) == self.batch and not plan.prefills
        self._step = {QUEUED_FIRST: None} if full else None

    def _end(self) -> None:
        """Close the step begun last: its grammar counts, derived parts, the rest."""
        step, self._step = self._step, None
        if step is None:
            return
        t0, mask0, accept0 = self._start
        mask, accept = self._grammar_counts()
        step["mask"], step["accept"] = mask - mask0, accept - accept0
        feed = step.pop("feed early", 0.0)
        step["wait"] = max(feed - step["accept"], 0.0)
        step["sampling"] = max(step.pop("sample batch", 0.0) - feed - step["mask"]
                               - step.get("queue early", 0.0), 0.0)
        for p in PARTS:
            step.setdefault(p, 0.0)
        step["other"] = max(time.perf_counter() - t0 - sum(step[p] for p in PARTS), 0.0)
        self.steps.append(step)

    def _grammar_counts(self) -> tuple[float, float]:
        g = self.grammar
        return (g.mask_s, g.accept_s) if g is not None else (0.0, 0.0)

    def _feed_began(self, _tracker=None) -> None:
        if self._step is not None:
            self._step[QUEUED_FIRST] = self.forward_queued

    @contextmanager
    def installed(self, queue_forward_first: bool = True):
        """Wrap the engine's functions for one round (enter while the engine is idle);
        queue_forward_first False: the sampler's early async_eval is not run."""
        from engine.core import runner, sampler, step_loop
        from engine.core.sampler_extras import SampleTracker
        from engine.core.step_loop import StepLoop
        run = StepLoop._run

        def sampling_began(*_args):
            self.forward_queued = False

        wrapped = {
            (runner.Runner, "decode"): _timed(self, runner.Runner.decode, "build fwd"),
            (StepLoop, "_run"): lambda loop, plan, extra: self._begin(plan) or run(
                loop, plan, extra),
            (StepLoop, "_complete"): _timed(self, StepLoop._complete, "read back"),
            (SampleTracker, "feed_early"): _timed(self, SampleTracker.feed_early,
                                                  "feed early", self._feed_began),
            (step_loop, "sample_batch"): _timed(self, step_loop.sample_batch,
                                                "sample batch", sampling_began),
            (step_loop, "mx"): _TimedMx(step_loop.mx, self, "queue rest"),
            (sampler, "mx"): _TimedMx(sampler.mx, self, "queue early",
                                      drop=not queue_forward_first),
        }
        saved = [(obj, name, getattr(obj, name)) for obj, name in wrapped]
        for (obj, name), value in wrapped.items():
            setattr(obj, name, value)
        try:
            yield self
        finally:
            self._end()
            for obj, name, value in saved:
                setattr(obj, name, value)


def _timed(probe: StepProbe, fn, part: str, before=None):
    """fn, its host time added to `part` of the probe's step; before(*args) first."""
    def wrapper(*args, **kwargs):
        if before is not None:
            before(*args)
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            probe.add(part, time.perf_counter() - t)
    return wrapper
