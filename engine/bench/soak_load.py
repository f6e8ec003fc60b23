"""The soak's load: engine threads submitting random requests (random cancels, some to
the context's end), and API clients streaming through the HTTP server (some dropped
mid-stream). Each worker runs until the deadline and records what happened in Tally."""
from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from engine.errors import InvalidRequestError, PromptTooLongError
from engine.events import TokenEvent
from engine.sampling_params import SamplingParams

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hum "
         "about rivers mountains lamps clocks and bread").split()
STOPS = ("\n\n", "fox", "the end", ".")


@dataclass
class Tally:
    """What the workers saw; list appends and Counter updates under one lock."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: Counter = field(default_factory=Counter)
    # Handles submitted and not yet seen to finish: kept apart from finished ones, so the
    # soak's own bookkeeping does not grow with the requests it made (RSS is measured).
    open: set = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)


def random_sampling(rng: np.random.Generator, max_context: int, to_the_end: bool
                    ) -> SamplingParams:
    greedy = rng.random() < 0.3
    return SamplingParams(
        max_tokens=max_context if to_the_end else int(rng.integers(1, 96)),
        temperature=0.0 if greedy else float(rng.uniform(0.1, 1.5)),
        top_p=float(rng.choice([1.0, rng.uniform(0.5, 1.0)])),
        top_k=int(rng.choice([0, rng.integers(1, 50)])),
        min_p=float(rng.choice([0.0, rng.uniform(0.0, 0.2)])),
        repetition_penalty=float(rng.choice([1.0, rng.uniform(1.0, 1.3)])),
        seed=int(rng.integers(0, 2**31)) if rng.random() < 0.5 else None,
        stop=tuple(rng.choice(STOPS, int(rng.integers(0, 3)), replace=False)))


def random_prompt(rng: np.random.Generator, vocab: int, max_context: int, history: list):
    """Text, messages, token ids, a too-long prompt, or a follow-up of an earlier turn."""
    kind = rng.random()
    if kind < 0.25:
        return " ".join(rng.choice(WORDS, int(rng.integers(1, 40))))
    if kind < 0.45:
        roles = ["user", "assistant"]
        return [{"role": roles[i % 2], "content": " ".join(rng.choice(WORDS, 6))}
                for i in range(int(rng.integers(0, 3)) * 2 + 1)]
    if kind < 0.65 and history:           # the next turn of a conversation: a cache hit
        prev = history[int(rng.integers(0, len(history)))]
        return [*prev, *rng.integers(1, vocab, int(rng.integers(1, 12))).tolist()]
    if kind < 0.72:                       # longer than the context: refused at submit
        return rng.integers(1, vocab, max_context + int(rng.integers(0, 20))).tolist()
    n = int(rng.integers(1, max_context // 2))
    return rng.integers(1, vocab, n).tolist()


def engine_worker(engine, seed: int, deadline: float, tally: Tally) -> None:
    rng = np.random.default_rng(seed)
    history: list[list[int]] = []
    max_context, vocab = engine.config.max_context, engine.vocab_size
    try:
        while time.monotonic() < deadline:
            _one_request(engine, rng, history, max_context, vocab, tally)
    except Exception as e:                 # a bug in the engine's API: the soak fails
        tally.error(f"engine worker {seed}: {type(e).__name__}: {e}")


def _one_request(engine, rng, history, max_context, vocab, tally) -> None:
    to_the_end = rng.random() < 0.08
    prompt = random_prompt(rng, vocab, max_context, history)
    if to_the_end:
        prompt = rng.integers(1, vocab, max_context - int(rng.integers(2, 40))).tolist()
    try:
        handle = engine.submit(prompt, random_sampling(rng, max_context, to_the_end))
    except (PromptTooLongError, InvalidRequestError):
        tally.count("refused")
        return
    with tally.lock:
        tally.open.add(handle)
    cancel_after = int(rng.integers(0, 40)) if rng.random() < 0.2 else None
    if rng.random() < 0.05:               # a cancel at a random moment, maybe before a token
        threading.Timer(float(rng.uniform(0, 0.3)), handle.cancel).start()
    tokens = 0
    for ev in handle:
        if isinstance(ev, TokenEvent):
            tokens += 1
            if cancel_after is not None and tokens >= cancel_after:
                handle.cancel()
                cancel_after = None
    fin = handle.finished
    with tally.lock:
        tally.open.discard(handle)
    tally.count(f"finished_{fin.reason}")
    tally.count("tokens", fin.stats.generated_tokens)
    if fin.reason == "error":
        tally.error(f"request {fin.request_id}: {fin.message}")
    if to_the_end and fin.reason == "length":
        tally.count("hit_max_context")
    ids = engine.tokenizer.encode_prompt(prompt) + list(fin.token_ids)
    if len(ids) < max_context - 16 and len(history) < 64:
        history.append(ids)


def api_worker(port: int, seed: int, deadline: float, tally: Tally) -> None:
    """Streaming chat requests through the server; ~30 % dropped mid-stream."""
    rng = np.random.default_rng(seed)
    try:
        while time.monotonic() < deadline:
            _one_stream(port, rng, tally)
    except Exception as e:
        tally.error(f"api worker {seed}: {type(e).__name__}: {e}")


def _one_stream(port: int, rng, tally: Tally) -> None:
    body = {"messages": [{"role": "user", "content": " ".join(rng.choice(WORDS, 8))}],
            "max_tokens": int(rng.integers(1, 80)), "stream": True,
            "temperature": float(rng.uniform(0, 1.2)), "seed": int(rng.integers(0, 1000))}
    if rng.random() < 0.1:
        body["temperature"] = "hot"       # a bad request among the good: a 400
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            tally.count(f"api_{resp.status}")
            if resp.status != 400 or body["temperature"] != "hot":
                tally.error(f"api status {resp.status} for a valid request")
            return
        drop_after = int(rng.integers(1, 20)) if rng.random() < 0.3 else None
        lines = 0
        for line in resp:
            lines += line.startswith(b"data:")
            if drop_after is not None and lines >= drop_after:
                tally.count("api_dropped")
                return
            if line.strip() == b"data: [DONE]":
                tally.count("api_done")
                return
        tally.error("an API stream ended without [DONE]")
    finally:
        conn.close()
