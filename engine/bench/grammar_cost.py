"""What one grammar-constrained row costs the other rows of its batch, per decode step.

    PYTHONPATH=. python -m engine.bench.grammar_cost [--model PATH] [--batch 8]
        [--max-tokens 64] [--rounds 3]

B greedy streams decode together, either all plain or with one of them constrained by
a JSON schema (an array of 500 digits, so it never ends early); every row bans EOS
(logit_bias) so all run the whole max_tokens. Rounds alternate the two setups; the
figure is the median duration of the full-batch decode steps (StepEvent), and the
ratio constrained / plain. The constrained batch pays the llguidance mask (host) plus
its transfer and the masked where (device), and the engine reads each step's token
before sampling the next for that batch (the grammar needs it), which takes away the
overlap of host and device work that plain batches get.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics

from engine import Engine, SamplingParams
from engine.events import StepEvent
from engine.server.grammar import json_schema_grammar, make_grammar

SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
          "minItems": 500}
PROMPTS = ["Write the digits of pi.", "Count from one.", "List some numbers.",
           "Tell me a story.", "What is 2+2?", "Name the planets.", "Say hello.",
           "Describe the sea.", "Explain gravity.", "Write a poem."]


def run_round(engine, batch: int, max_tokens: int, constrained: bool) -> list[float]:
    eos = tuple((t, -100.0) for t in engine.tokenizer.eos_token_ids)
    plain = SamplingParams(max_tokens=max_tokens, temperature=0, logit_bias=eos)
    steps: list[StepEvent] = []
    listener = steps.append
    engine.add_listener(listener)
    try:
        handles = []
        for i in range(batch):
            params = plain
            if constrained and i == 0:
                grammar = make_grammar(engine.tokenizer, engine.vocab_size,
                                       json_schema_grammar(SCHEMA), "bench")
                params = dataclasses.replace(plain, constraint=grammar)
            messages = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
            handles.append(engine.submit(messages, params))
        for h in handles:
            h.result()
    finally:
        engine.remove_listener(listener)
    return [s.duration * 1e3 for s in steps
            if isinstance(s, StepEvent) and s.kind == "decode" and s.batch_size == batch]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    with Engine.load(args.model) as engine:
        run_round(engine, args.batch, 8, True)                 # warm up both paths
        times = {False: [], True: []}
        for _ in range(args.rounds):
            for constrained in (False, True):
                times[constrained] += run_round(engine, args.batch, args.max_tokens,
                                                constrained)
        plain, masked = (statistics.median(times[k]) for k in (False, True))
        print(f"{engine.model_name}, B={args.batch}, {args.max_tokens} tokens x "
              f"{args.rounds} rounds: decode step median {plain:.2f} ms plain, "
              f"{masked:.2f} ms with one constrained row: {masked / plain:.3f}x "
              f"({len(times[False])} / {len(times[True])} steps)")


if __name__ == "__main__":
    main()
