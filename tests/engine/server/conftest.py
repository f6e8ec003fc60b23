"""A real API server on a free localhost port, on its own asyncio loop thread,
over a tiny random Llama engine; clients are the official `openai` package."""
from __future__ import annotations

import json

import pytest
from server_harness import MAX_CONTEXT, EventLog, ServerThread, make_client
from test_tokenizer import QWEN3
from tiny_models import write_tiny_llama
from xml_template import XML_TOOLS

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


# A tiny model whose chat template is Qwen3's, as shipped (tools and tool calls).
def _engine_with_template(folder, template: str):
    write_tiny_llama(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "chat_template": template}))
    # Qwen3's tool preamble is ~900 byte-level tokens of this tiny vocabulary.
    return Engine.load(folder, EngineConfig(num_pages=600, page_size=16, prefill_chunk=256,
                                            max_context=3000, max_decode_slowdown=1e9))


@pytest.fixture(scope="session")
def qwen_engine(tmp_path_factory):
    with _engine_with_template(tmp_path_factory.mktemp("tools") / "llama", QWEN3) as e:
        yield e


@pytest.fixture(scope="session")
def xml_client(tmp_path_factory):
    """A client of a tiny model whose template writes calls in Qwen3.5's XML form."""
    folder = tmp_path_factory.mktemp("xml-tools") / "llama"
    with _engine_with_template(folder, XML_TOOLS) as e:
        server = ServerThread(EngineHolder(engine=e, loading=False),
                              ServerConfig(host="127.0.0.1", port=0))
        yield make_client(server.url)
        server.close()


@pytest.fixture(scope="session")
def qserver(qwen_engine):
    server = ServerThread(EngineHolder(engine=qwen_engine, loading=False),
                          ServerConfig(host="127.0.0.1", port=0))
    yield server
    server.close()


@pytest.fixture(scope="session")
def qclient(qserver):
    return make_client(qserver.url)
