"""Where and how the API server listens, and how long it waits for a client."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from engine.http_origin import check_origin

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_CLIENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT          # 0: any free port (tests)
    api_key: str | None = None        # None: no key needed (fine on loopback)
    max_body_bytes: int = 16 << 20    # a long conversation's JSON, with room to spare
    shutdown_timeout_s: float = 1.0   # streams still open then are cancelled
    cors_origins: tuple[str, ...] = ()  # browser origins allowed (cors.py); () = CORS off
    # How long a client may stall before the server hangs up: its request's headers
    # (slowloris), its body, or reading a stream (a reply nobody reads is cancelled and
    # its pages freed). Also the idle time a kept-alive connection is held open.
    client_timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S
    send_buffer_bytes: int = 64 << 10   # per connection, in the kernel (limits.py)

    def __post_init__(self):
        if not self.host:
            raise ValueError("ServerConfig.host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"ServerConfig.port must be 0..65535, got {self.port}")
        object.__setattr__(self, "cors_origins",
                           tuple(check_origin(o) for o in self.cors_origins))
        if self.api_key == "":
            object.__setattr__(self, "api_key", None)
        if self.max_body_bytes < 1024 or self.shutdown_timeout_s < 0:
            raise ValueError("ServerConfig.max_body_bytes >= 1024, shutdown_timeout_s >= 0")
        if not 0 < self.client_timeout_s <= 3600:
            raise ValueError("the client timeout must be more than 0 and at most 3600 "
                             f"seconds, got {self.client_timeout_s}")

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

    def exposure_refusal(self, insecure: bool) -> str | None:
        """Why `python -m engine serve` will not start (None: it may): a network address
        without an API key lets anyone on the network use the model, unless --insecure."""
        if self.is_loopback or self.api_key or insecure:
            return None
        return (f"--host {self.host} makes the API reachable from other machines, and no "
                "--api-key is set, so anyone on the network could use it. Start with "
                "--api-key KEY (clients send 'Authorization: Bearer KEY'), or add --insecure "
                "if this network is trusted.")
