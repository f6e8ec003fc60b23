"""Where and how the API server listens."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT          # 0: any free port (tests)
    api_key: str | None = None        # None: no key needed (fine on loopback)
    max_body_bytes: int = 16 << 20    # a long conversation's JSON, with room to spare
    shutdown_timeout_s: float = 1.0   # streams still open then are cancelled
    cors_origins: tuple[str, ...] = ()  # browser origins allowed (cors.py); () = CORS off

    def __post_init__(self):
        if not self.host:
            raise ValueError("ServerConfig.host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"ServerConfig.port must be 0..65535, got {self.port}")
        object.__setattr__(self, "cors_origins", tuple(self.cors_origins))
        if self.api_key == "":
            object.__setattr__(self, "api_key", None)
        if self.max_body_bytes < 1024 or self.shutdown_timeout_s < 0:
            raise ValueError("ServerConfig.max_body_bytes >= 1024, shutdown_timeout_s >= 0")

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:             # a host name: assume it reaches the network
            return False

    def exposure_warning(self) -> str | None:
        """What to tell the user when other machines can reach the server."""
        if self.is_loopback:
            return None
        return (f"warning: the API server listens on {self.host}, reachable from other "
                "machines" + ("" if self.api_key else " with no API key (see --api-key)"))
