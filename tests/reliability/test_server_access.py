"""Issue 26 item 1: who may use `python -m engine serve`. With --api-key every route
refuses a request without the key (compared in constant time) and the key is never
echoed, in an answer or in the log; it binds 127.0.0.1 by default; a network address
without a key is refused unless --insecure."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
from serve_process import REPO, ServeProcess

KEY = "sk-tandem-7f3a9c1e5b"
ROUTES = [("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
          ("POST", "/v1/completions"), ("GET", "/health"), ("GET", "/nope"),
          ("GET", "/v1/chat/completions"), ("POST", "/v1/embeddings")]
BODY = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()


@pytest.fixture(scope="module")
def keyed(tiny_folder, tmp_path_factory):
    s = ServeProcess(tiny_folder, tmp_path_factory.mktemp("keyed") / "serve.log",
                     "--api-key", KEY)
    yield s
    s.stop()


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer ", "Bearer wrong",
                                  f"Bearer {KEY[:-1]}", f"Bearer {KEY}x", f"Basic {KEY}",
                                  f"bearer  {KEY}", "Bearer \u00e9\u00e9"])
def test_every_route_refuses_without_the_key(keyed, auth):
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth.encode("utf-8").decode("latin-1")
    for method, path in ROUTES:
        status, body = keyed.request(method, path, BODY if method == "POST" else None,
                                     headers)
        assert status == 401, (method, path, body)
        assert body["error"]["code"] == "invalid_api_key"
        assert KEY not in json.dumps(body) and KEY[:-1] not in json.dumps(body)


def test_the_key_opens_every_route_and_is_never_logged(keyed):
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    assert keyed.request("GET", "/v1/models", None, headers)[0] == 200
    assert keyed.request("POST", "/v1/chat/completions", BODY, headers)[0] == 200
    assert keyed.request("GET", "/health", None, headers)[0] == 200
    status, body = keyed.request("POST", "/v1/chat/completions", b"{bad", headers)
    assert status == 400 and KEY not in json.dumps(body)
    assert KEY not in keyed.log() and KEY[:8] not in keyed.log()


def test_the_key_is_compared_in_constant_time():
    from engine.server import api_server, limits
    assert "compare_digest" in inspect.getsource(limits.key_matches)
    assert "key_matches" in inspect.getsource(api_server.ApiServer._check_key)
    assert limits.key_matches(KEY, KEY) and not limits.key_matches(KEY[:-1], KEY)
    assert not limits.key_matches("\udcff", KEY)       # a surrogate-escaped header byte


def _serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "engine", "serve", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_a_network_address_without_a_key_refuses_to_start(tiny_folder):
    out = _serve("--model", str(tiny_folder), "--host", "0.0.0.0", "--port", "0")
    assert out.returncode == 2
    assert "reachable from other machines" in out.stderr and "--api-key" in out.stderr
    assert "--insecure" in out.stderr and "Serving" not in out.stderr


def test_insecure_starts_with_the_warning(tiny_folder, tmp_path):
    s = ServeProcess(tiny_folder, tmp_path / "serve.log", "--host", "0.0.0.0", "--insecure")
    try:
        assert "warning: the API server listens on 0.0.0.0, reachable from other machines" \
            in s.log()
    finally:
        s.stop()


def test_a_network_address_with_a_key_warns_and_serves(tiny_folder, tmp_path):
    s = ServeProcess(tiny_folder, tmp_path / "serve.log", "--host", "0.0.0.0",
                     "--api-key", KEY)
    try:
        assert "reachable from other machines" in s.log() and KEY not in s.log()
    finally:
        s.stop()


def test_binds_loopback_by_default(tiny_folder, tmp_path):
    from engine.__main__ import build_parser
    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"
    s = ServeProcess(tiny_folder, tmp_path / "serve.log")
    try:
        assert f"listening on http://127.0.0.1:{s.port}/v1" in s.log()
        assert "warning" not in s.log()
    finally:
        s.stop()
