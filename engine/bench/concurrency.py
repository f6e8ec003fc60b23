"""The app's workload: conversations streaming side by side, a new one arriving.

``python -m engine.bench.concurrency [--model PATH|synthetic:NAME] [--streams 3]
[--prompt 200,2000] [--rounds 3]``

Drives the engine only through its public API, the way the app and the server do: one
consumer thread per request handle, streams of different lengths at the app's sampling
settings, and a new prompt submitted while they stream. For each new-prompt length and
round it measures the new prompt's time to first token alone (nobody streaming) and
under load, the streams' inter-token gaps (median and max) in the calm before and
while the prompt is read, and, from the engine's step events, the chunk lengths the
prefill budget chose and how many steps it flagged degraded. Timing only: nothing
here belongs in a test.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from collections import Counter

from engine import Engine, EngineConfig, SamplingParams
from engine.bench.engine_start import open_engine
from engine.bench.runs import add_moe_max_pairs_arg, apply_moe_max_pairs, mixed_forward_arg
from engine.core.chunk_pieces import pieces_of
from engine.core.compiled_forward import runs_mixed_forwards
from engine.core.step_loop import pipelines_steps
from engine.events import StepEvent, TokenEvent
from engine.kernel_cache import compiled_modules

STREAM_PROMPTS = (40, 120, 300)     # the streams' own prompt lengths (cycled)
CALM_TOKENS = 12                    # tokens every stream gets before the new prompt


class Stream(threading.Thread):
    """One conversation's consumer: submits, reads every token, notes when it came.
    A reply that ends (EOS) is followed by another, as a user would keep chatting."""

    def __init__(self, engine: Engine, prompt: list[int], sampling: SamplingParams):
        super().__init__(daemon=True)
        self.engine, self.prompt, self.sampling = engine, prompt, sampling
        self.times: list[float] = []
        self.stop = threading.Event()
        self.handle = None

    def run(self) -> None:
        while not self.stop.is_set():
            self.handle = self.engine.submit(self.prompt, self.sampling)
            for ev in self.handle:
                if isinstance(ev, TokenEvent):
                    self.times.extend([time.perf_counter()] * max(1, len(ev.token_ids)))
                if self.stop.is_set():
                    self.handle.cancel()

    def gaps(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """(from, to) of each gap between tokens seen in [t0, t1], and the gap that runs
        past t1 (to the first token after it): a stall that ends after t1 is a gap of
        the window too (session 49's H100: the engine stalled ~5 s from the new prompt's
        last chunk to its first token, and the window's gaps showed none of it)."""
        ts = [t for t in self.times if t0 <= t <= t1]
        after = next((t for t in self.times if t > t1), None)
        if ts and after is not None:
            ts.append(after)
        return [(a, b) for a, b in zip(ts, ts[1:]) if b > a]

    def gaps_ms(self, t0: float, t1: float) -> list[float]:
        return [1000 * (b - a) for a, b in self.gaps(t0, t1)]


def long_gaps(gaps: list[tuple[int, float, float]], steps: list[StepEvent], t0: float,
              over_ms: float) -> list[dict]:
    """The gaps (stream, from, to) longer than over_ms, each placed among the steps: when
    it began (ms after t0), which steps it overlapped and how much of it they covered.
    What they did not cover fell between steps (the step loop's own host work, or a
    consumer thread waiting its turn); a gap over two whole steps is a token seen late."""
    out = []
    for stream, a, b in gaps:
        if 1000 * (b - a) <= over_ms:
            continue
        hit = [e for e in steps if e.t_start < b and e.t_end > a]
        covered = sum(min(b, e.t_end) - max(a, e.t_start) for e in hit)
        out.append({"stream": stream, "from_ms": round(1000 * (a - t0), 1),
                    "ms": round(1000 * (b - a), 1), "steps": [e.step for e in hit],
                    "covered_ms": round(1000 * covered, 1)})
    return out


def _prompt(n: int, vocab: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(10, vocab - 1) for _ in range(n)]


def _ttft(engine: Engine, prompt: list[int], seen: dict | None = None) -> float:
    """Seconds from submit to the first token, seen by the consumer (as the app sees it).
    seen: gets how the request ended and how many prompt tokens the prefix cache gave
    it: a TTFT that is no prompt's full read (an error before any token, a cached
    prefix) says so in the summary instead of passing for one (session 49's H100: one
    round's alone TTFT came out at a tenth of the others, cause not shown)."""
    t0 = time.perf_counter()
    handle = engine.submit(prompt, SamplingParams(max_tokens=1, temperature=0.0))
    got_token = False
    for ev in handle:
        if isinstance(ev, TokenEvent):
            got_token = True
            break
    t = time.perf_counter() - t0
    result = handle.result()
    if seen is not None:
        # A token whose text is not complete yet (a byte of a UTF-8 character: the
        # synthetic models' random tokens often are) comes with the FinishedEvent only.
        seen.update(token=got_token or bool(result.token_ids), finish=result.finish_reason,
                    cached=result.stats.cached_tokens)
    return t


def measure_round(engine: Engine, vocab: int, n_streams: int, length: int, seed: int,
                  sampling: SamplingParams, floor_ms: float) -> dict:
    seen: list[StepEvent] = []

    def listener(ev) -> None:       # the engine thread: the steps from the streams' start
        if isinstance(ev, StepEvent):
            seen.append(ev)
    alone_seen, loaded_seen = {}, {}
    alone = _ttft(engine, _prompt(length, vocab, seed), alone_seen)
    streams = [Stream(engine, _prompt(STREAM_PROMPTS[i % len(STREAM_PROMPTS)], vocab,
                                      seed * 100 + i), sampling) for i in range(n_streams)]
    engine.add_listener(listener)
    for s in streams:
        s.start()
    while min(len(s.times) for s in streams) < CALM_TOKENS:
        time.sleep(0.02)
    t_calm = time.perf_counter()
    while min(len(s.gaps_ms(t_calm, time.perf_counter())) for s in streams) < 6:
        time.sleep(0.02)
    # A kernel MLX compiles into its cache while the prompt is read is a compile at
    # first use: seconds of the engine thread's time (empty off CUDA).
    compiled = compiled_modules()
    t_submit = time.perf_counter()
    loaded = _ttft(engine, _prompt(length, vocab, seed + 5000), loaded_seen)
    t_first = t_submit + loaded
    compiled = sorted(compiled_modules() - compiled)
    time.sleep(0.2)                 # a token after t_first, for the gap that spans it
    for s in streams:
        s.stop.set()
    for s in streams:
        s.join(timeout=60)
    engine.remove_listener(listener)    # the step that spans t_first has ended by now
    before = [g for s in streams for g in s.gaps_ms(t_calm, t_submit)]
    during = [g for s in streams for g in s.gaps_ms(t_submit, t_first)]
    # the steps while the prompt is read (from a calm step or two before it), and the
    # streams' own admission before them: the costs the budget had learned by then
    steps = [e for e in seen if e.t_end >= t_submit and e.t_start <= t_first]
    admission = [e for e in seen if e.t_end < t_submit]
    mixed = [e for e in steps if e.kind == "mixed"]
    return {"alone_s": alone, "loaded_s": loaded, "alone_seen": alone_seen,
            "loaded_seen": loaded_seen, "compiled": compiled,
            "before": before, "during": during,
            "chunks": [e.prefill_tokens for e in mixed],
            # decode-only steps while the prompt waited: the budget banking (prefill_budget)
            "banked": sum(e.kind == "decode" and t_submit <= e.t_start < t_first for e in steps),
            "degraded": sum(e.degraded for e in mixed), "mixed": len(mixed),
            "steps": [_step_record(e, t_submit) for e in steps],
            "admission": [_step_record(e, t_submit) for e in admission if e.kind == "mixed"],
            # where the gaps over twice the floor fell (issue 21's max-gap target)
            "long_gaps": long_gaps([(i, a, b) for i, s in enumerate(streams)
                                    for a, b in s.gaps(t_submit, t_first)],
                                   steps, t_submit, 2 * floor_ms)}


def _step_record(e: StepEvent, t0: float) -> dict:
    return {"step": e.step, "kind": e.kind, "t_ms": round(1000 * (e.t_start - t0), 2),
            "ms": round(1000 * (e.t_end - e.t_start), 2),
            "batch": e.batch_size, "prompt_tokens": e.prefill_tokens,
            "degraded": e.degraded, "queue_ms": round(1000 * e.queue_s, 2),
            "read_ms": round(1000 * e.read_s, 2),
            "predicted_ms": round(1000 * e.predicted_s, 2), "why": e.chunk_reason}


def _summary(length: int, rounds: list[dict], floor_ms: float, pieces: int = 1) -> str:
    """pieces: EngineConfig.chunk_pieces (K > 1: a mixed step's tokens are its share, a
    K-th, of the chunk it runs a layer range of)."""
    med = statistics.median
    alone = med(r["alone_s"] for r in rounds)
    loaded = med(r["loaded_s"] for r in rounds)
    before = [g for r in rounds for g in r["before"]]
    during = [g for r in rounds for g in r["during"]] or [float("nan")]
    chunks = sorted({c for r in rounds for c in r["chunks"]})
    # which of the budget's rules chose the steps' chunks while the prompt was read
    rules = Counter(s["why"].split(",")[0] + (" (capped)" if "capped" in s["why"] else "")
                    for r in rounds for s in r["steps"] if s.get("why"))
    ratios = ", ".join(f"{r['loaded_s'] / r['alone_s']:.2f}x" for r in rounds)
    odd = _odd_reads(rounds)
    return (f"prompt {length:>5}: TTFT alone {alone:.3f} s, with streams {loaded:.3f} s "
            f"({loaded / alone:.2f}x; rounds {ratios}) | "
            f"stream gap before median {med(before):.0f} ms max {max(before):.0f} ms, "
            f"during median {med(during):.0f} ms mean {statistics.fmean(during):.0f} ms "
            f"max {max(during):.0f} ms, {sum(g > 2 * floor_ms for g in during)}/{len(during)} "
            f"over 2x the floor "
            f"(floor {floor_ms:.0f} ms, {med(during) / med(before):.2f}x calm) | "
            f"chunks {chunks}{f' (tokens a step reads of {pieces}-piece chunks)' if pieces > 1 else ''}, {sum(r.get('banked', 0) for r in rounds)} calm steps between | degraded "
            f"{sum(r['degraded'] for r in rounds)}/{sum(r['mixed'] for r in rounds)} mixed steps"
            f" | rules {', '.join(f'{why} x{n}' for why, n in rules.most_common())}"
            + (f" | NOT A FULL READ: {odd}" if odd else "")
            + "".join(f" | round {i + 1} compiled at first use: {', '.join(r['compiled'])}"
                      for i, r in enumerate(rounds) if r.get("compiled")))


def _odd_reads(rounds: list[dict]) -> str:
    """The TTFT requests that were no full prompt read: no token, or a cached prefix."""
    out = []
    for i, r in enumerate(rounds):
        for which in ("alone", "loaded"):
            seen = r.get(f"{which}_seen") or {}
            if seen and (not seen["token"] or seen["cached"]):
                out.append(f"round {i + 1} {which} {r[f'{which}_s']:.3f} s (finish "
                           f"{seen['finish']}, {seen['cached']} tokens cached, "
                           f"{'a' if seen['token'] else 'no'} token)")
    return "; ".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.concurrency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="a model path, synthetic:NAME, or the built-in")
    p.add_argument("--streams", type=int, default=3, help="conversations streaming")
    p.add_argument("--prompt", default="200,2000", help="new prompts' lengths in tokens")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.7, help="the streams' (the app's)")
    p.add_argument("--no-mixed-forward", action="store_true",
                   help="EngineConfig.mixed_forward=False (default: the engine's choice)")
    p.add_argument("--mixed-forward", action="store_true",
                   help="EngineConfig.mixed_forward=True")
    p.add_argument("--compile-chunks", action="store_true",
                   help="EngineConfig.compile_chunks: prompt chunks and mixed steps compiled")
    p.add_argument("--chunk-pieces", type=int, default=None,
                   help="EngineConfig.chunk_pieces: a chunk beside the streams read a layer "
                   "range a step over this many steps (1, 2, 4, 8; default: the engine's "
                   "choice, 4 on a CUDA GPU, else 1)")
    p.add_argument("--pipeline-steps", choices=("on", "off"), default=None,
                   help="EngineConfig.pipeline_steps (default: the engine's choice, GPU only)")
    p.add_argument("--max-decode-slowdown", type=float, default=None,
                   help="EngineConfig.max_decode_slowdown (default: the engine's)")
    p.add_argument("--steps-log", default=None,
                   help="write every step while a new prompt is read (its start in ms after "
                   "the submit), the mixed steps that admitted the streams before it, and "
                   "where the gaps over twice the floor fell (JSON lines) here")
    add_moe_max_pairs_arg(p)
    args = p.parse_args(argv)
    apply_moe_max_pairs(args)
    lengths = [int(n) for n in args.prompt.split(",") if n]
    if args.steps_log:
        open(args.steps_log, "w").close()      # this run's steps only (appended per length)
    config = EngineConfig(max_num_seqs=args.max_num_seqs,
                          max_context=max(lengths + [max(STREAM_PROMPTS)]) + 4096,
                          mixed_forward=mixed_forward_arg(args),
                          compile_chunks=args.compile_chunks,
                          chunk_pieces=args.chunk_pieces,
                          pipeline_steps={"on": True, "off": False}.get(args.pipeline_steps),
                          **({} if args.max_decode_slowdown is None else
                             {"max_decode_slowdown": args.max_decode_slowdown}))
    with open_engine(args.model, config) as engine:
        vocab = engine.vocab_size
        sampling = SamplingParams(temperature=args.temperature, top_p=0.95, max_tokens=4000)
        floor_ms = 1000 / engine.config.min_stream_tok_s
        print(f"# {engine.model_name}, {args.streams} streams, config {config}; mixed "
              f"forwards {'on' if runs_mixed_forwards(config) else 'off'}, steps "
              f"{'' if pipelines_steps(config) else 'not '}pipelined", flush=True)
        _ttft(engine, _prompt(max(lengths), vocab, 1))          # first-use costs out
        for length in lengths:
            rounds = [measure_round(engine, vocab, args.streams, length, 17 * r + length,
                                    sampling, floor_ms) for r in range(args.rounds)]
            print(_summary(length, rounds, floor_ms, pieces_of(config)), flush=True)
            if args.steps_log:
                with open(args.steps_log, "a") as f:
                    for r, result in enumerate(rounds):
                        f.write(json.dumps({"prompt": length, "round": r,
                                            **{k: result[k] for k in (
                                                "alone_s", "loaded_s", "alone_seen",
                                                "loaded_seen", "compiled")},
                                            "steps": result["steps"],
                                            "admission": result["admission"],
                                            "long_gaps": result["long_gaps"]}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
