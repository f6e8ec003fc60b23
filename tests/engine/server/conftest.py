"""A real API server on a free localhost port, on its own asyncio loop thread,
over a tiny random Llama engine; clients are the official `openai` package."""
from __future__ import annotations

import pytest
from server_harness import MAX_CONTEXT, EventLog, ServerThread, make_client
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig
from engine.server import EngineHolder, ServerConfig


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
