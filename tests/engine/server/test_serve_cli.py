"""`python -m engine serve` end to end: listens, answers 503 or 200 while it loads, serves,
and stops cleanly on Ctrl-C."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from server_harness import make_client

ROOT = Path(__file__).parents[3]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _models_status(url: str, key: str | None) -> int | None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/models", headers=headers),
                                    timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None                     # not listening yet


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_serve_command_serves_and_stops_on_a_signal(tiny_folder, stop_signal):
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "serve", "--model", str(tiny_folder),
         "--port", str(port), "--api-key", "k"],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
        # As from a terminal: a child inherits an ignored SIGINT (a suite run as a
        # background job, or a library that ignores it), and Python started so keeps
        # ignoring Ctrl-C: the full suite hung here twice that way.
        preexec_fn=_default_sigint)
    try:
        seen = set()
        deadline = time.monotonic() + 120
        while 200 not in seen and time.monotonic() < deadline:
            seen.add(_models_status(url, "k"))
            time.sleep(0.05)
        assert seen <= {None, 503, 200} and 200 in seen
        assert _models_status(url, None) == 401 and _models_status(url, "bad") == 401
        out = make_client(url, api_key="k").chat.completions.create(
            model="llama", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert out.usage.completion_tokens >= 1
    finally:
        proc.send_signal(stop_signal)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"Serving llama at {url}" in err and "Traceback" not in err
