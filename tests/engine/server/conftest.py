"""A real API server on a free localhost port, on its own asyncio loop thread,
over a tiny random Llama engine; clients are the official `openai` package."""
from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig
from engine.events import FinishedEvent, StepEvent
from engine.server import ApiServer, EngineHolder, ServerConfig

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


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("server-tiny") / "llama")


@pytest.fixture(scope="module")
def engine(tiny_folder):
    # The prompt budget off (a whole chunk each step) so batching does not depend on timing.
    config = EngineConfig(num_pages=128, page_size=4, prefill_chunk=32, max_context=MAX_CONTEXT,
                          max_decode_slowdown=1e9)
    with Engine.load(tiny_folder, config) as e:
        yield e


@pytest.fixture
def serve():
    """serve(source, **ServerConfig fields) -> a started ServerThread (stopped after)."""
    made = []

    def start(source, **config):
        made.append(ServerThread(source, ServerConfig(**{"host": "127.0.0.1", "port": 0,
                                                         **config})))
        return made[-1]
    yield start
    for s in made:
        s.close()


@pytest.fixture
def server(serve, engine):
    return serve(EngineHolder(engine=engine, loading=False))


@pytest.fixture
def client(server):
    return make_client(server.url)


@pytest.fixture
def log(engine):
    log = EventLog(engine)
    yield log
    log.close()


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
