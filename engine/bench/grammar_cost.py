"""What one grammar-constrained row costs the other rows of its batch, per decode step.

    PYTHONPATH=. python -m engine.bench.grammar_cost [--model PATH|synthetic:NAME]
        [--batch 8] [--max-tokens 64] [--rounds 5]

B greedy streams decode together through the public engine API (Engine.submit, step
events): all plain, or with row 0 constrained by a JSON schema through the same
Grammar the server's response_format builds. Two schemas, both too long to end inside
max_tokens: "digits" (an array of >= 500 digits: few tokens allowed, a cheap mask) and
"text" (a string of >= 4000 characters: nearly every token allowed, llguidance's
costliest mask). Every row bans EOS (logit_bias), so all run the whole max_tokens.
Two more setups are "text" with an older sampler, so that one run compares them:
"text-sync" as before 53606c0 (the step's forward not queued before the host waits for
the previous token) and "text-item" as before 0adc37e (the token read as ids[row].item(),
a new op that waits for everything queued since: on a GPU the next step's forward, so
the device idled while the host built the rest). Rounds alternate the setups; the
figure is the median step period (end to end of consecutive full-batch decode steps:
what every row's stream waits per token) and its ratio to plain, pooled and as the
median of each round's own ratio (a load that drifts over the run hits the setups of
one round alike), and the host time llguidance spends filling the mask per step (timed
around fill_mask). Then, per setup, where a step's host time goes (engine/bench/
step_probe.py: building the forward, queuing, waiting for the previous token, mask,
accept, sampling, reading back, the rest) and whether the forward was queued when the
wait began. A constrained batch pays the mask and the grammar's accept (host), the
mask's upload and the masked `where` (device), and waits for each step's token before
it can sample the next; with the forward queued first and the wait for that token only,
the device runs the forward meanwhile.

Synthetic models (token-id prompts, no tokenizer) get a grammar over a generated
byte-level vocabulary of the model's size (SyntheticVocab): 256 byte tokens and random
words. The mask's size and the device work are the real ones; llguidance's host time
is a proxy for the model's own vocabulary.

Needs llguidance: without it there is no mask to measure, and it says so and exits 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shlex
import statistics
import sys
import time

from engine.bench.step_probe import PARTS, QUEUED_FIRST, StepProbe, medians_ms
from engine.core import sampler_extras
from engine.server import grammar

SCHEMAS = {
    "digits": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
               "minItems": 500},
    "text": {"type": "object", "properties": {"text": {"type": "string", "minLength": 4000}},
             "required": ["text"]},
}
PROMPTS = ["Write the digits of pi.", "Count from one.", "List some numbers.",
           "Tell me a story.", "What is 2+2?", "Name the planets.", "Say hello.",
           "Describe the sea.", "Explain gravity.", "Write a poem."]
SETUPS = ("plain", *SCHEMAS, "text-sync", "text-item")


class _SampleReadAsBefore(sampler_extras._Sample):
    """A tracked row's sample as the tracker read it before 0adc37e (the "text-item"
    setup): its token read as ids[row].item() each time, a new op evaluated behind all
    the work queued since (on a GPU: the next step's forward), in feed_early and again in
    confirm."""

    @property
    def token(self) -> int:
        return int(self.ids[self.row].item())


class SyntheticVocab:
    """A byte-level BPE vocabulary of `size` ids for llguidance (what build_grammar reads
    of a tokenizer): the 256 bytes, random words, and an end-of-text id last."""

    def __init__(self, size: int, seed: int = 0):
        self.size = size
        self.eos_token_ids = frozenset({size - 1})
        self._json = json.dumps(_tokenizer_json(size, seed))

    def backend_json(self) -> str:
        return self._json


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte (the ByteLevel pre-tokenizer's)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def _tokenizer_json(size: int, seed: int) -> dict:
    rng = random.Random(seed)
    vocab = {c: i for i, c in enumerate(_byte_chars())}
    while len(vocab) < size - 1:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        vocab.setdefault(("Ġ" if rng.random() < 0.5 else "") + word, len(vocab))
    eos = "<|endoftext|>"
    vocab[eos] = size - 1
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}
    return {"version": "1.0", "added_tokens": [
        {"id": size - 1, "content": eos, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
        "model": {"type": "BPE", "vocab": vocab, "merges": []}}


class TimedGrammar:
    """A Grammar whose fill_mask and accept are timed (host seconds, summed)."""

    def __init__(self, inner):
        self.inner = inner
        self.num_masks = 0
        self.mask_s = 0.0
        self.accept_s = 0.0

    def fill_mask(self, bitmask_row) -> None:
        t = time.perf_counter()
        self.inner.fill_mask(bitmask_row)
        self.mask_s += time.perf_counter() - t
        self.num_masks += 1

    def accept(self, token_id: int) -> None:
        t = time.perf_counter()
        self.inner.accept(token_id)
        self.accept_s += time.perf_counter() - t

    def rollback(self, num_tokens: int) -> None:
        self.inner.rollback(num_tokens)


def run_round(engine, prompts, vocab_source, setup: str, batch: int, max_tokens: int):
    """(step periods ms, step durations ms, mask ms per step, StepProbe.steps: host
    seconds by part) of the full-batch decode steps of one round."""
    timed = None
    if setup != "plain":
        rule = grammar.json_schema_grammar(SCHEMAS[setup.split("-")[0]])
        timed = TimedGrammar(grammar.build_grammar(vocab_source, engine.vocab_size, rule))
    probe = StepProbe(batch, timed)
    sample_class = sampler_extras._Sample
    if setup.endswith("-item"):       # swapped while the engine is idle (between rounds)
        sampler_extras._Sample = _SampleReadAsBefore
    try:
        with probe.installed(queue_forward_first=not setup.endswith("-sync")):
            periods, durations = _run_round(engine, prompts, timed, batch, max_tokens)
    finally:
        sampler_extras._Sample = sample_class
    mask_ms = 1e3 * timed.mask_s / max(timed.num_masks, 1) if timed else 0.0
    return periods, durations, mask_ms, probe.steps


def _run_round(engine, prompts, timed, batch: int, max_tokens: int):
    from engine import SamplingParams
    from engine.events import StepEvent
    eos = tuple((t, -100.0) for t in engine.tokenizer.eos_token_ids)
    plain = SamplingParams(max_tokens=max_tokens, temperature=0, logit_bias=eos)
    steps: list = []
    engine.add_listener(steps.append)
    try:
        handles = []
        for i in range(batch):
            params = plain
            if timed is not None and i == 0:
                params = dataclasses.replace(plain, constraint=timed)
            handles.append(engine.submit(prompts[i % len(prompts)], params))
        for h in handles:
            h.result()
    finally:
        engine.remove_listener(steps.append)
    full = [s for s in steps if isinstance(s, StepEvent) and s.kind == "decode"
            and s.batch_size == batch]
    periods = [(b.t_end - a.t_end) * 1e3 for a, b in zip(full, full[1:]) if b.step == a.step + 1]
    return periods, [s.duration * 1e3 for s in full]


def _open(model: str | None, batch: int):
    from engine import EngineConfig
    from engine.bench.engine_start import open_engine
    from engine.bench.synthetic import SYNTHETIC_PREFIX
    config = EngineConfig(max_num_seqs=max(batch, 1))
    return open_engine(model, config), bool(model and model.startswith(SYNTHETIC_PREFIX))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.grammar_cost",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="a model path, synthetic:NAME, or the built-in")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    print("# python -m engine.bench.grammar_cost "
          + shlex.join(sys.argv[1:] if argv is None else argv), flush=True)
    if not grammar.available():
        print("grammar_cost: llguidance is not installed, so there is no grammar mask to "
              "measure; nothing was run. Install it (pip install llguidance) and run again.",
              file=sys.stderr)
        return 2
    engine, synthetic = _open(args.model, args.batch)
    with engine:
        if synthetic:
            vocab_source = SyntheticVocab(engine.vocab_size)
            rng = random.Random(0)
            prompts = [[rng.randrange(10, engine.vocab_size - 1) for _ in range(32)]
                       for _ in range(args.batch)]
        else:
            vocab_source = engine.tokenizer
            prompts = [[{"role": "user", "content": text}] for text in PROMPTS]
        for setup in SETUPS:                                   # first-use costs out
            run_round(engine, prompts, vocab_source, setup, args.batch, 8)
        rounds = []                      # per round: setup -> (periods, durations, mask)
        for _ in range(args.rounds):
            rounds.append({setup: run_round(engine, prompts, vocab_source, setup,
                                            args.batch, args.max_tokens) for setup in SETUPS})
        _report(engine.model_name, args, rounds, synthetic)
    return 0


def _report(model: str, args, rounds: list[dict], synthetic: bool) -> None:
    med = statistics.median
    pooled = {s: [p for r in rounds for p in r[s][0]] for s in SETUPS}
    base = med(pooled["plain"])
    print(f"{model}, B={args.batch}, {args.max_tokens} tokens x {args.rounds} rounds "
          f"(alternating {' / '.join(SETUPS)}); vocabulary for the grammar: "
          f"{'synthetic (SyntheticVocab)' if synthetic else 'the model tokenizer'}")
    for setup in SETUPS:
        period = med(pooled[setup])
        duration = med(d for r in rounds for d in r[setup][1])
        label = "no constrained row" if setup == "plain" else f"1 row '{setup}'"
        line = (f"  {label:<22} step period median {period:8.3f} ms ({period / base:.3f}x "
                f"plain), step duration median {duration:8.3f} ms")
        if setup != "plain":
            ratios = sorted(med(r[setup][0]) / med(r["plain"][0]) for r in rounds)
            mask = med(r[setup][2] for r in rounds)
            line += (f"; per-round ratio median {med(ratios):.3f}x (range {ratios[0]:.3f}-"
                     f"{ratios[-1]:.3f}); llguidance mask {mask:.3f} ms a step")
        print(line + f"  [{len(pooled[setup])} periods]")
    _report_host_parts(rounds)


def _report_host_parts(rounds: list[dict]) -> None:
    """Where each setup's step goes on the host (engine/bench/step_probe.py): medians over
    the full-batch decode steps of every round."""
    print("  host ms a step, by part (medians; engine/bench/step_probe.py):")
    print(f"    {'':<22}" + "".join(f"{p:>12}" for p in PARTS) + f"  {QUEUED_FIRST}")
    for setup in SETUPS:
        parts = medians_ms([step for r in rounds for step in r[setup][3]])
        label = "no constrained row" if setup == "plain" else f"1 row '{setup}'"
        share = parts[QUEUED_FIRST]
        print(f"    {label:<22}" + "".join(f"{parts[p]:12.3f}" for p in PARTS)
              + f"  {'-' if share is None else f'{share:.0%} of steps'}")


if __name__ == "__main__":
    raise SystemExit(main())
