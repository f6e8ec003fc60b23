"""The Python clients' side of the client check (runs in the clients' own venv, not the
project's: it imports nothing from Tandem). Each check prints one JSON line."""
from __future__ import annotations

import json
import os
import sys
import traceback
from importlib import metadata

URL = os.environ["TANDEM_URL"]                    # http://127.0.0.1:PORT/v1
MODEL = os.environ["TANDEM_MODEL"]
TOOLS_URL = os.environ.get("TANDEM_TOOLS_URL", "")   # a model whose template has tools
TOOLS_MODEL = os.environ.get("TANDEM_TOOLS_MODEL", "")
ASK = [{"role": "user", "content": "What is the capital of France? One word."}]
CITY = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 20},
    "population": {"type": "integer", "minimum": 0, "maximum": 99999999}},
    "required": ["city", "population"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 8},
        "days": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["city", "days"], "additionalProperties": False}}}
# A finished tool-call round: what an agent sends back after running the tool.
HISTORY = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21, "sky": "clear"}'}]


class Checks:
    def __init__(self, client: str, distribution: str):
        """distribution: the package's name on PyPI (its installed version is reported)."""
        self.client, self.version = client, metadata.version(distribution)

    def run(self, name: str, fn, needs_tools: bool = False) -> None:
        if needs_tools and not TOOLS_URL:
            self._emit(name, None, "skipped: no tools server")
            return
        try:
            detail = fn()
        except Exception as e:  # noqa: BLE001 - every failure is a result
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            self._emit(name, False, tb[:400])
            return
        self._emit(name, True, str(detail or "")[:200])

    def _emit(self, name, ok, detail) -> None:
        print(json.dumps({"client": self.client, "version": self.version, "check": name,
                          "ok": ok, "detail": detail}), flush=True)


def check_city(text: str) -> str:
    """The json_schema reply parses and has the schema's keys and types."""
    obj = json.loads(text)
    assert set(obj) == {"city", "population"}, obj
    assert isinstance(obj["city"], str) and len(obj["city"]) <= 20, obj
    assert isinstance(obj["population"], int) and not isinstance(obj["population"], bool), obj
    return text


def check_args(arguments) -> str:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert set(args) == {"city", "days"} and 1 <= args["days"] <= 5, args
    return json.dumps(args)


def expect(cond, what) -> None:
    if not cond:
        raise AssertionError(what)


if __name__ == "__main__":
    sys.exit("run a client file (openai_py.py, ...), not this one")
