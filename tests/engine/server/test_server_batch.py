"""API requests decode together in one engine batch; a client that leaves frees its pages."""
from __future__ import annotations

import threading
import time

import openai
import pytest
from server_harness import MAX_CONTEXT, make_client, pool_is_whole

from engine import SamplingParams
from engine.events import FinishedEvent, SubmittedEvent


class SubmitGate:
    """Holds the engine thread at the first submission until `n` API requests are in
    the engine's inbox, so they all enter the same step, whatever the machine's speed."""

    def __init__(self, engine, server, n: int):
        self.server, self.n, self.engine = server, n, engine
        engine.add_listener(self.on_event)

    def on_event(self, ev):
        if isinstance(ev, SubmittedEvent):
            deadline = time.monotonic() + 30
            while self.server.server.num_active < self.n and time.monotonic() < deadline:
                time.sleep(0.005)

    def close(self):
        self.engine.remove_listener(self.on_event)


def test_concurrent_streams_decode_in_one_batch(server, engine, log):
    n, prompts = 4, ["hello", "the quick brown fox", "world", "jumps the fox"]
    alone = [engine.generate([[{"role": "user", "content": p}]],
                             SamplingParams(max_tokens=12))[0].text for p in prompts]
    gate = SubmitGate(engine, server, n)
    results: list = [None] * n

    def stream(i):
        chunks = make_client(server.url).chat.completions.create(
            model=engine.model_name, messages=[{"role": "user", "content": prompts[i]}],
            max_tokens=12, temperature=0, stream=True)
        results[i] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(n)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        gate.close()
    assert results == alone          # batched greedy decoding changes no reply
    assert max(s.batch_size for s in log.steps()) == n


def _slow_steps(engine):
    """A listener that makes each engine step last >= 5 ms, so a reply of 150 tokens
    is still decoding when the client hangs up, on any machine."""
    def on_event(ev):
        if type(ev).__name__ == "StepEvent":
            time.sleep(0.005)
    engine.add_listener(on_event)
    return on_event


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_cancels_and_frees_pages(server, engine, log, stream):
    slow = _slow_steps(engine)
    try:
        client = make_client(server.url)
        max_tokens = MAX_CONTEXT - 20
        prompt = [5, 6, 7, 8, 9]
        if stream:
            with client.completions.create(model=engine.model_name, prompt=prompt,
                                           max_tokens=max_tokens, temperature=0,
                                           stream=True) as chunks:
                next(iter(chunks))            # decoding has begun; now hang up
        else:
            with pytest.raises(openai.APITimeoutError):
                client.with_options(timeout=0.3).completions.create(
                    model=engine.model_name, prompt=prompt, max_tokens=max_tokens,
                    temperature=0)
        rid = _last_submitted(log)
        fin = log.finished(rid)
    finally:
        engine.remove_listener(slow)
    assert fin.reason == "cancelled" and fin.stats.generated_tokens < max_tokens
    assert _wait(lambda: server.server.num_active == 0)
    assert pool_is_whole(engine)


def _last_submitted(log) -> int:
    assert _wait(lambda: any(isinstance(e, SubmittedEvent) for e in log.events))
    return [e for e in log.events if isinstance(e, SubmittedEvent)][-1].request_id


def _wait(predicate, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_failing_requests_do_not_disturb_a_running_stream(server, engine, log):
    client = make_client(server.url)
    prompt = [{"role": "user", "content": "hello world"}]
    alone = engine.generate([prompt], SamplingParams(max_tokens=40))[0].text
    slow = _slow_steps(engine)
    text, bad = [], []
    try:
        chunks = client.chat.completions.create(model=engine.model_name, messages=prompt,
                                                max_tokens=40, temperature=0, stream=True)
        for i, c in enumerate(chunks):
            text.append(c.choices[0].delta.content or "")
            if i == 2:                         # mid-stream: a burst of bad requests
                bad = _bad_requests(client, engine)
    finally:
        engine.remove_listener(slow)
    assert "".join(text) == alone
    assert bad == [400, 404, 400]
    assert not [e for e in log.events if isinstance(e, FinishedEvent) and e.reason == "error"]


def _bad_requests(client, engine) -> list[int]:
    codes = []
    for kw in ({"model": engine.model_name, "messages": []},
               {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]},
               {"model": engine.model_name, "messages": [{"role": "user", "content": "x"}],
                "temperature": "hot"}):
        try:
            client.chat.completions.create(**kw)
        except openai.APIStatusError as e:
            codes.append(e.status_code)
    return codes
