"""A local OpenAI-compatible HTTP API over an Engine it is given (no Qt, no mx).

    server = ApiServer(source, ServerConfig(port=8000))   # source.engine, source.loading
    url = await server.start()       # on the running asyncio loop (asyncio.run or qasync)
    ...
    await server.stop()

Requests decode in the same batch as everything else the engine runs.
"""
from engine.server.api_server import ApiServer
from engine.server.engine_source import EngineHolder, EngineSource
from engine.server.server_config import ServerConfig

__all__ = ["ApiServer", "EngineHolder", "EngineSource", "ServerConfig"]
