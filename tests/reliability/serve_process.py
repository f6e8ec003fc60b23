"""A real `python -m engine serve` in a subprocess, and raw HTTP clients for it (the
hostile ones are sockets: no client library sends a broken request on purpose)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).parents[2]
START_S = 120                 # a guard against a hang at start only


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    """Resident memory of a process (Linux /proc; elsewhere ps)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True)
    return int(out.stdout.strip() or 0) / 1024


class ServeProcess:
    """`python -m engine serve --model FOLDER --port P ARGS...`, its stderr in a file."""

    def __init__(self, model: Path, log: Path, *args: str, wait: bool = True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self._log = open(log, "w")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "serve", "--model", str(model),
             "--port", str(self.port), *args],
            cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT, text=True)
        self.headers: dict[str, str] = {}
        if wait:
            self.wait_ready()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}: {self.log()}")
            if "Serving " in self.log():
                return
            time.sleep(0.05)
        raise AssertionError(f"serve did not start: {self.log()}")

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 60) -> tuple[int, dict]:
        """(status, parsed JSON body) of one request, whatever the status."""
        hdrs = {**self.headers, **(headers or {})}
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def post(self, path: str, payload, **kw) -> tuple[int, dict]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return self.request("POST", path, data, {"Content-Type": "application/json",
                                                 **kw.pop("headers", {})}, **kw)

    def greedy(self, content: str = "the quick brown fox", max_tokens: int = 24) -> str:
        status, body = self.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0})
        assert status == 200, body
        return body["choices"][0]["message"]["content"]

    def health_after_probe(self) -> dict:
        """/health as of a fresh step: a one-token probe runs first (the pool is reported
        as of the engine's last step, and an idle engine takes none)."""
        status, _ = self.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 1})
        assert status == 200
        status, health = self.request("GET", "/health")
        assert status == 200
        return health

    def stream_socket(self, payload: dict, rcvbuf: int | None = None,
                      path: str = "/v1/chat/completions") -> socket.socket:
        """A raw socket that has sent a streaming request (read it, or do not)."""
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.connect(("127.0.0.1", self.port))
        body = json.dumps({**payload, "stream": True}).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: "
                f"application/json\r\nContent-Length: {len(body)}\r\n")
        head += "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        s.sendall(head.encode() + b"\r\n" + body)
        return s

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

