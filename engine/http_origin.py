"""A browser origin as a user types it (Settings, `--cors-origin`): checked and kept in
the form a browser sends in its Origin header. Plain Python: the app's settings import it
without loading the server (engine/server/cors.py uses it)."""
from __future__ import annotations


def check_origin(origin: str) -> str:
    """A browser origin to allow as typed in Settings: "*" (any), or scheme://host[:port]
    with no path (what a browser sends as Origin); the form kept, else ValueError."""
    origin = origin.strip().rstrip("/")
    if origin == "*":
        return origin
    scheme, sep, rest = origin.partition("://")
    host = rest.split(":", 1)[0]
    if scheme not in ("http", "https") or not sep or not host or "/" in rest or " " in rest:
        raise ValueError(f"An allowed origin is * or like http://localhost:3000 (scheme, "
                         f"host and port, no path), not {origin!r}.")
    if ":" in rest and not rest.split(":", 1)[1].isdigit():
        raise ValueError(f"The port in {origin!r} is not a number.")
    return origin
