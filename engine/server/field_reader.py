"""Typed reads of a JSON request body's fields; a wrong type is a 400, never a crash."""
from __future__ import annotations

from engine.server.api_error import bad_request


class FieldReader:
    """Reads `body[name]` as one expected type, naming the field when it is wrong."""

    def __init__(self, body: object):
        if not isinstance(body, dict):
            raise bad_request("The request body must be a JSON object.")
        self.body = body

    def has(self, name: str) -> bool:
        return self.body.get(name) is not None

    def number(self, name: str, default: float, lo: float, hi: float) -> float:
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad_request(f"'{name}' must be a number.", name)
        if not lo <= value <= hi:
            raise bad_request(f"'{name}' must be between {lo} and {hi}; got {value}.", name)
        return float(value)

    def integer(self, name: str, default: int | None, lo: int | None = None) -> int | None:
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_request(f"'{name}' must be an integer.", name)
        if lo is not None and value < lo:
            raise bad_request(f"'{name}' must be >= {lo}; got {value}.", name)
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.body.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise bad_request(f"'{name}' must be true or false.", name)
        return value

    def string(self, name: str, default: str | None) -> str | None:
        value = self.body.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise bad_request(f"'{name}' must be a string.", name)
        return value

    def obj(self, name: str) -> dict:
        value = self.body.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise bad_request(f"'{name}' must be an object.", name)
        return value

    def stop(self) -> tuple[str, ...]:
        value = self.body.get("stop")
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
            raise bad_request("'stop' must be a non-empty string or a list of them.", "stop")
        return tuple(value)
