"""A synthetic engine run for the trace tests: two requests decoded together.

Times are perf_counter-like seconds from a fake clock, so the recorder's
receipt stamps are deterministic.
"""
from engine.events import FinishedEvent, RequestStats, StepEvent, SubmittedEvent, TokenEvent
from engine.telemetry.reading import Reading


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def stats(prompt, generated):
    return RequestStats(prompt_tokens=prompt, generated_tokens=generated, ttft_s=0.01,
                        decode_tok_s=50.0)


def reading(t, mhz=1398.0, watts=12.5):
    return Reading(t=t, gpu_mhz=mhz, gpu_watts=watts, mhz_label="DVFS-weighted MHz",
                   source="IOReport")


def token(rid, i):
    return TokenEvent(request_id=rid, text=f"t{i}", token_ids=(i,))


def two_requests(rec, clock, t0=1000.0):
    """Feed the recorder: r1 and r2 submitted, prefilled, decoded as a batch of 2."""
    def at(t, ev):
        clock.now = t
        rec.on_event(ev)

    at(t0 + 0.000, SubmittedEvent(request_id=1, t=t0 + 0.000, prompt_tokens=12))
    at(t0 + 0.001, SubmittedEvent(request_id=2, t=t0 + 0.001, prompt_tokens=20))
    at(t0 + 0.010, StepEvent(step=0, t_start=t0 + 0.002, t_end=t0 + 0.010, kind="prefill",
                             prefill_request_ids=(1,), prefill_tokens=12, kv_pages_used=1,
                             kv_pages_total=64))
    at(t0 + 0.0105, token(1, 0))
    rec.on_reading(reading(t0 + 0.005))
    at(t0 + 0.020, StepEvent(step=1, t_start=t0 + 0.011, t_end=t0 + 0.020, kind="mixed",
                             decode_request_ids=(1,), batch_size=1, prefill_request_ids=(2,),
                             prefill_tokens=20, kv_pages_used=3, kv_pages_total=64))
    at(t0 + 0.0205, token(1, 1))
    at(t0 + 0.0206, token(2, 0))
    t = t0 + 0.021
    for step in range(2, 6):
        batch = (1, 2) if step < 5 else (2,)
        at(t + 0.008, StepEvent(step=step, t_start=t, t_end=t + 0.008, kind="decode",
                                decode_request_ids=batch, batch_size=len(batch),
                                kv_pages_used=3 + step // 3, kv_pages_total=64))
        for rid in batch:
            at(t + 0.0085, token(rid, step))
        rec.on_reading(reading(t + 0.004, mhz=1300.0 + step, watts=10.0 + step))
        if step == 4:
            at(t + 0.0087, FinishedEvent(request_id=1, reason="length", stats=stats(12, 5)))
        t += 0.0095
    at(t + 0.001, FinishedEvent(request_id=2, reason="stop", stats=stats(20, 5)))
    return t + 0.001
