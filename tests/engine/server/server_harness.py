"""Helpers of the server tests: a real ApiServer on its own loop thread, the engine's events,
clients (the official `openai` package, and raw POSTs for malformed bodies)."""
from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

import openai

from engine.events import FinishedEvent, StepEvent
from engine.server import ApiServer, ServerConfig

MAX_CONTEXT = 200


class ServerThread:
    """ApiServer on a loop of its own, so the tests' blocking clients can call it."""

    def __init__(self, source, config: ServerConfig):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ApiServer(source, config)
        try:
            self.url = self.call(self.server.start())
        except BaseException:
            self.close()
            raise

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class EventLog:
    """Every engine event, collected on the engine thread."""

    def __init__(self, engine):
        self.events: list = []
        self.engine = engine
        engine.add_listener(self.events.append)

    def close(self):
        self.engine.remove_listener(self.events.append)

    def steps(self) -> list[StepEvent]:
        return [e for e in list(self.events) if isinstance(e, StepEvent)]

    def finished(self, request_id: int, timeout: float = 30) -> FinishedEvent:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in list(self.events):
                if isinstance(e, FinishedEvent) and e.request_id == request_id:
                    return e
            time.sleep(0.01)
        raise AssertionError(f"request {request_id} did not finish")


def make_client(url: str, api_key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=60)


def post_raw(url: str, path: str, data: bytes, headers: dict | None = None):
    """(status, parsed JSON body) of a raw POST, whatever the status."""
    req = urllib.request.Request(url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def pool_is_whole(engine) -> bool:
    """Only a probe request and finished turns kept for a next turn hold pages."""
    from engine import SamplingParams
    log = EventLog(engine)
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=1))
    log.close()
    last = log.steps()[-1]
    return last.kv_pages_used - last.kv_pages_cached <= 1 and last.num_running <= 1
