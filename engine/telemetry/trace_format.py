"""TraceFormatter: engine events and telemetry readings -> Chrome trace event dicts.

Runs off the engine thread (at flush or save time) and is fed records in
arrival order; it keeps the little state that the format needs: which
request spans are open, where the engine-loop track ends, the last value of
each counter. Timestamps are time.perf_counter() seconds turned into
microseconds, the clock the engine stamps its events with.

Tracks: one "engine loop" thread track with an X slice per step; one async
track per request (b ... n first_token ... e) in category "request"; one
counter track per metric, one value per name so Perfetto draws each alone.
"""
from __future__ import annotations

from engine.events import ErrorEvent, FinishedEvent, StepEvent, SubmittedEvent, TokenEvent
from engine.telemetry.reading import Reading

ENGINE_TID = 1
TELEMETRY_TID = 2
REQUEST_CATEGORY = "request"
# A pause longer than this between steps means the engine went idle; the
# rate counters drop to zero there instead of holding the last step's value.
IDLE_GAP_S = 0.05

DECODE_TOK_S = "decode tok/s"
PREFILL_TOK_S = "prefill tok/s"
BATCH_SIZE = "batch size"
KV_PAGES = "KV pages in use"
GPU_MHZ = "GPU MHz"
GPU_W = "GPU W"
# The CPU fallback sampler measures the CPU's clock: its tracks say so.
CPU_MHZ = "CPU MHz"
CPU_W = "CPU W"


def us(t_s: float) -> float:
    """perf_counter seconds -> trace microseconds (ns resolution is plenty)."""
    return round(t_s * 1e6, 3)


class TraceFormatter:
    def __init__(self, pid: int, start_t: float, process_name: str = "Tandem") -> None:
        self.pid = pid
        self.start_us = us(start_t)
        self.process_name = process_name
        self._open: dict[int, tuple[str, float]] = {}   # request id -> (span name, begin ts)
        self._first_token_seen: set[int] = set()
        # A trace holds only what happened while recording: no slice starts earlier.
        self._track_end = self.start_us                 # end of the last X on the engine track
        self._prev_step_end: float | None = None
        self._counters: dict[str, tuple[float, float]] = {}  # name -> (ts, value)

    def metadata(self) -> list[dict]:
        m = {"ph": "M", "pid": self.pid, "ts": 0}
        return [
            {**m, "name": "process_name", "tid": ENGINE_TID, "args": {"name": self.process_name}},
            {**m, "name": "thread_name", "tid": ENGINE_TID, "args": {"name": "engine loop"}},
            {**m, "name": "thread_sort_index", "tid": ENGINE_TID, "args": {"sort_index": 0}},
            {**m, "name": "thread_name", "tid": TELEMETRY_TID, "args": {"name": "telemetry"}},
            {**m, "name": "thread_sort_index", "tid": TELEMETRY_TID, "args": {"sort_index": 1}},
        ]

    def format(self, t: float, item: object) -> list[dict]:
        """Trace events for one record; t is when the recorder received it."""
        kind = type(item)
        if kind is StepEvent:
            return self._step(item)
        if kind is Reading:
            return self._reading(item)
        if kind is SubmittedEvent:
            return self._begin(item.request_id, us(item.t), {"prompt_tokens": item.prompt_tokens})
        if kind is TokenEvent:
            return self._first_token(us(t), item)
        if kind is FinishedEvent:
            return self._finish(us(t), item)
        if kind is ErrorEvent:
            return self._error(us(t), item)
        return []

    def closing_events(self, t: float, reason: str) -> list[dict]:
        """End events for spans still open, so a snapshot has every b matched by an e.

        They are not remembered: the next snapshot closes the spans again,
        later, or the real FinishedEvent does.
        """
        return [self._async("e", name, rid, max(us(t), b_ts), {"reason": reason})
                for rid, (name, b_ts) in self._open.items()]

    # -- engine loop ---------------------------------------------------------
    def _step(self, ev: StepEvent) -> list[dict]:
        out: list[dict] = []
        if self._prev_step_end is not None and ev.t_start - self._prev_step_end > IDLE_GAP_S:
            idle_ts = us(self._prev_step_end)
            for name in (DECODE_TOK_S, PREFILL_TOK_S, BATCH_SIZE):
                out += self._counter(name, idle_ts, 0)
        self._prev_step_end = ev.t_end
        if us(ev.t_end) <= self.start_us:
            return out            # wholly before the recording began
        # Steps overlapped by async evaluation may start before the previous
        # one ended, and the first may start before the recording: clamp so slices
        # on the track nest instead of crossing, and begin inside the recording.
        raw_ts, end = us(ev.t_start), us(ev.t_end)
        ts = max(raw_ts, self._track_end)
        dur = max(0.0, round(end - ts, 3))
        self._track_end = ts + dur
        common = {"step": ev.step}
        if ts > raw_ts:
            common["clamped_us"] = round(ts - raw_ts, 3)
        # why the prefill budget read this many prompt tokens beside the decode rows
        why = getattr(ev, "chunk_reason", "")
        if ev.kind in ("decode", "mixed") and ev.batch_size > 0:
            out.append(self._slice("decode_step", ts, dur, {
                **common, "batch_size": ev.batch_size,
                "request_ids": list(ev.decode_request_ids),
                "kv_pages": f"{ev.kv_pages_used}/{ev.kv_pages_total}",
                **({"chunk_reason": why} if why else {})}))
        if ev.kind in ("prefill", "mixed") and ev.prefill_request_ids:
            out.append(self._slice("prefill_chunk", ts, dur, {
                **common, "request_id": ev.prefill_request_ids[0],
                "request_ids": list(ev.prefill_request_ids),
                "tokens": ev.prefill_tokens,
                **({"degraded": True} if getattr(ev, "degraded", False) else {}),
                **({"chunk_reason": why} if why else {})}))
        seconds = ev.t_end - ev.t_start
        if seconds > 0:
            out += self._counter(DECODE_TOK_S, ts, ev.batch_size / seconds)
            out += self._counter(PREFILL_TOK_S, ts, ev.prefill_tokens / seconds)
        out += self._counter(BATCH_SIZE, ts, ev.batch_size)
        out += self._counter(KV_PAGES, ts + dur, ev.kv_pages_used)
        return out

    def _slice(self, name: str, ts: float, dur: float, args: dict) -> dict:
        return {"ph": "X", "name": name, "cat": "engine", "pid": self.pid, "tid": ENGINE_TID,
                "ts": ts, "dur": dur, "args": args}

    # -- telemetry -----------------------------------------------------------
    def _reading(self, r: Reading) -> list[dict]:
        out: list[dict] = []
        cpu = (r.mhz_label or "").startswith("CPU")      # the fallback sampler's clock
        if r.gpu_mhz is not None:
            out += self._counter(CPU_MHZ if cpu else GPU_MHZ, us(r.t), r.gpu_mhz,
                                 TELEMETRY_TID)
        if r.gpu_watts is not None:
            out += self._counter(CPU_W if cpu else GPU_W, us(r.t), r.gpu_watts,
                                 TELEMETRY_TID)
        return out

    def _counter(self, name: str, ts: float, value: float,
                 tid: int = ENGINE_TID) -> list[dict]:
        last = self._counters.get(name)
        if last is not None:
            if last[1] == value:
                return []      # a counter is a step function: repeats add nothing
            ts = max(ts, last[0])
        self._counters[name] = (ts, value)
        return [{"ph": "C", "name": name, "pid": self.pid, "tid": tid, "ts": ts,
                 "args": {"value": round(value, 3) if isinstance(value, float) else value}}]

    # -- requests --------------------------------------------------------------
    def _async(self, ph: str, name: str, rid: int, ts: float, args: dict) -> dict:
        return {"ph": ph, "name": name, "cat": REQUEST_CATEGORY, "id": rid,
                "pid": self.pid, "tid": ENGINE_TID, "ts": ts, "args": args}

    def _begin(self, rid: int, ts: float, args: dict) -> list[dict]:
        if rid in self._open:
            return []
        name = f"request {rid}"
        self._open[rid] = (name, ts)
        return [self._async("b", name, rid, ts, args)]

    def _ensure_open(self, rid: int) -> list[dict]:
        # A request already running when recording began: its span starts
        # with the recording, and its first token is unknown.
        if rid in self._open:
            return []
        self._first_token_seen.add(rid)
        return self._begin(rid, self.start_us, {"submitted_before_recording": True})

    def _first_token(self, ts: float, ev: TokenEvent) -> list[dict]:
        rid = ev.request_id
        out = self._ensure_open(rid)
        if rid in self._first_token_seen:
            return out
        self._first_token_seen.add(rid)
        b_ts = self._open[rid][1]
        ts = max(ts, b_ts)
        return out + [self._async("n", "first_token", rid, ts,
                                  {"ttft_ms": round((ts - b_ts) / 1e3, 3)})]

    def _finish(self, ts: float, ev: FinishedEvent) -> list[dict]:
        rid = ev.request_id
        out = self._ensure_open(rid)
        name, b_ts = self._open.pop(rid)
        self._first_token_seen.discard(rid)
        s = ev.stats
        args = {"reason": ev.reason, "prompt_tokens": s.prompt_tokens,
                "generated_tokens": s.generated_tokens, "ttft_ms": round(s.ttft_s * 1e3, 3),
                "decode_tok_s": round(s.decode_tok_s, 3), "num_preemptions": s.num_preemptions}
        return out + [self._async("e", name, rid, max(ts, b_ts), args)]

    def _error(self, ts: float, ev: ErrorEvent) -> list[dict]:
        if ev.request_id not in self._open:
            return []
        b_ts = self._open[ev.request_id][1]
        return [self._async("n", "error", ev.request_id, max(ts, b_ts),
                            {"message": ev.message})]
