"""The "Serve on localhost" switch: the OpenAI-compatible API server on the app's
qasync loop, over the bridge's engine, so API requests decode in the same batch
as the conversations on screen (and show in the status panel and traces)."""
from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.status.activity import READING, Activity


class ServerController(QObject):
    """Signals:
        address_changed(str): the API's base URL, "" when the server is off
        error(str): the server could not start (e.g. the port is taken)
    """
    address_changed = Signal(str)
    error = Signal(str)

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        # The bridge is the server's EngineSource: `engine` (None while a model
        # loads, so clients get 503) and `loading`. The server never closes it.
        self._bridge = bridge
        self.server = None

    @property
    def address(self) -> str:
        return self.server.url if self.server is not None else ""

    @property
    def num_active(self) -> int:
        """API requests in flight."""
        return self.server.num_active if self.server is not None else 0

    def activity(self) -> list[Activity]:
        """The API requests in flight, for the status panel: sent, no token seen here
        (the panel reads whether each is queued, reading or streaming from the engine)."""
        if self.server is None:
            return []
        return [Activity(rid, f"API request {rid}", READING)
                for rid in sorted(self.server.routes.active)]

    async def apply(self, enabled: bool, port: int, cors_origin: str = "") -> bool:
        """Start, stop or move the server to match the settings (cors_origin: the one
        browser origin allowed, "" none); False if it cannot listen."""
        origins = (cors_origin,) if cors_origin else ()
        if self.server is not None and (not enabled or self.server.config.port != port
                                        or self.server.config.cors_origins != origins):
            await self.stop()
        if enabled and self.server is None:
            from engine.errors import ServerStartError
            from engine.server import ApiServer, ServerConfig
            server = ApiServer(self._bridge, ServerConfig(port=port, cors_origins=origins))
            try:
                await server.start()
            except ServerStartError as e:
                self.error.emit(str(e))
                return False
            self.server = server
            self.address_changed.emit(self.address)
        return True

    async def stop(self) -> None:
        """Close the listener; open API streams are cancelled (their pages come back)."""
        server, self.server = self.server, None
        if server is not None:
            await server.stop()
            self.address_changed.emit("")
