"""The built-in model on the CPU: Tandem, mlx-lm and llama.cpp side by side.

    PYTHONPATH=. python -m engine.bench.cpu_peer_llamacpp --rounds 3 --threads 2 [--only tandem|mlx-lm]

Same process, alternating per round, medians reported. Measures what a chat user
feels: time to first token of a 320-token prompt, decode tok/s at B=1, and the
aggregate decode tok/s at B=8. Tandem runs with its CPU defaults (MKL, dense weights
when they fit, engine/loading/cpu_dense.py) and, for the "before" column, quantized
weights; mlx-lm runs on the same arrays (engine/bench_peer.py); llama.cpp
(llama-cpp-python) reads the same GGUF file with the same thread count (B=1 only:
its Python API decodes one sequence). A benchmark, never a test.

llama.cpp's OpenMP threads spin while they wait; on a shared 2-core machine a spinning
thread holds the core the other one needs (measured: 2 threads 1.9 tok/s spinning,
14.3 tok/s passive), so the OpenMP wait policy is passive unless set.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "passive")   # before llama_cpp loads libgomp

from engine import Engine, EngineConfig  # noqa: E402
from engine.bench.peer import Peer, peer_model  # noqa: E402
from engine.bench.runs import ours_decode, ours_prefill  # noqa: E402
from engine.loading import cpu_layout  # noqa: E402


def _prompt(n: int, vocab: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(10, vocab - 1) for _ in range(n)]


class Tandem:
    def __init__(self, label: str, cpu_weights: str, fixed_shapes: bool | None = None,
                 layout: bool = True):
        self.label = label
        # The layout is decided while loading (engine/loading/cpu_layout.py).
        before = os.environ.get(cpu_layout.ENV_VAR)
        if not layout:
            os.environ[cpu_layout.ENV_VAR] = "off"
        self.engine = Engine.load(None, EngineConfig(cpu_weights=cpu_weights,
                                                     fixed_shapes=fixed_shapes))
        os.environ.pop(cpu_layout.ENV_VAR, None)
        if before is not None:
            os.environ[cpu_layout.ENV_VAR] = before
        self.peer = Peer(peer_model(self.engine.bundle.model, self.engine.bundle.config))

    def ttft(self, prompt):
        return ours_prefill(self.engine, prompt)[0]

    def decode_tok_s(self, prompts, steps):
        return len(prompts) / ours_decode(self.engine, prompts, steps)[0]

    def peer_ttft(self, prompt):
        return self.peer.prefill_seconds(prompt)

    def peer_decode_tok_s(self, prompts, steps):
        return len(prompts) / self.peer.decode_step_seconds(prompts, steps)


class LlamaCpp:
    def __init__(self, path: str, threads: int):
        from llama_cpp import Llama
        self.llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads,
                         n_ctx=1024, n_batch=512, verbose=False)

    def ttft(self, prompt):
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval(prompt)          # logits of the last position come with it
        return time.perf_counter() - t0

    def decode_tok_s(self, prompt, steps):
        self.llm.reset()
        self.llm.eval(prompt)
        t0 = time.perf_counter()
        for _ in range(steps):
            tok = int(self.llm.scores[self.llm.n_tokens - 1].argmax())
            self.llm.eval([tok])
        return steps / (time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=16, help="decode steps per run")
    p.add_argument("--prompt-tokens", type=int, default=320)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--no-quantized", action="store_true", help="skip the 'before' column")
    p.add_argument("--no-llamacpp", action="store_true")
    p.add_argument("--padded", action="store_true",
                   help="also dense with the GPU's fixed shapes (padded batches and chunks)")
    p.add_argument("--row-major", action="store_true",
                   help="also dense with the weights as loaded (TANDEM_CPU_LAYOUT=off)")
    p.add_argument("--only", choices=("tandem", "mlx-lm"),
                   help="time one engine (the other's weights load, idle): what ran before "
                        "in a process moved mlx-lm's B=1 step 2x here (session 34), so "
                        "alternate processes of each")
    args = p.parse_args()
    engines = [Tandem("dense (default)", "auto")]
    if args.padded:
        engines.append(Tandem("dense, padded shapes", "auto", fixed_shapes=True))
    if args.row_major:
        engines.append(Tandem("dense, row-major", "auto", layout=False))
    if not args.no_quantized:
        engines.append(Tandem("quantized", "quantized"))
    first = engines[0].engine
    print(f"BLAS: {first.blas_status}\nweights: {first.weights_status}", flush=True)
    llama = None if args.no_llamacpp else LlamaCpp(str(first.model_path), args.threads)
    vocab = first.bundle.config["vocab_size"]
    results: dict[str, list[float]] = {}

    def record(key, value):
        results.setdefault(key, []).append(value)
        print(f"  {key}: {value:.3f}", flush=True)

    for r in range(args.rounds):
        prompt = _prompt(args.prompt_tokens, vocab, seed=r)
        batch = [_prompt(32, vocab, seed=100 * r + i) for i in range(8)]
        print(f"round {r}", flush=True)
        for t in engines:
            if args.only != "mlx-lm":
                record(f"Tandem {t.label} TTFT s", t.ttft(prompt))
                record(f"Tandem {t.label} B=1 tok/s", t.decode_tok_s(batch[:1], args.steps))
                record(f"Tandem {t.label} B=8 tok/s", t.decode_tok_s(batch, args.steps))
            if args.only != "tandem":
                record(f"mlx-lm {t.label} TTFT s", t.peer_ttft(prompt))
                record(f"mlx-lm {t.label} B=1 tok/s",
                       t.peer_decode_tok_s(batch[:1], args.steps))
                record(f"mlx-lm {t.label} B=8 tok/s", t.peer_decode_tok_s(batch, args.steps))
        if llama is not None:
            record("llama.cpp TTFT s", llama.ttft(prompt))
            record("llama.cpp B=1 tok/s", llama.decode_tok_s(batch[0], args.steps))
    print(f"\nmedians over {args.rounds} rounds ({args.threads} threads for llama.cpp):")
    for key, xs in results.items():
        print(f"| {key} | {statistics.median(xs):.2f} |")
    for t in engines:
        t.engine.close()
    return 0


if __name__ == "__main__":
    import atexit

    from engine.core.mlx_threads import clear_thread_streams
    atexit.register(clear_thread_streams)
    raise SystemExit(main())
