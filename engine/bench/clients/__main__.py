"""Real client software nobody here wrote, against `python -m engine serve`.

    PYTHONPATH=. .venv/bin/python -m engine.bench.clients \
        --python /tmp/clients-venv/bin/python --node-dir /tmp/clients-node

Install the clients outside the project's venv first (the test suite never needs them):

    python3 -m venv /tmp/clients-venv
    /tmp/clients-venv/bin/pip install openai litellm langchain-openai anthropic
    mkdir -p /tmp/clients-node && cd /tmp/clients-node && npm init -y && npm install openai

Starts the server on the built-in model (or --model) and, for the tool-call checks, a
second one on a tiny model whose template has tools (tools_model.py); runs each client
(openai_py.py, openai_node.cjs, litellm_py.py, langchain_py.py, anthropic_py.py) and
prints PASS / FAIL / SKIP per check with the client's version. Exit status 1 if any failed.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CLIENTS = {"openai": "openai_py.py", "node": "openai_node.cjs", "litellm": "litellm_py.py",
           "langchain": "langchain_py.py", "anthropic": "anthropic_py.py"}


class Server:
    """`python -m engine serve` on a free port, until closed."""

    def __init__(self, model: str | None, log: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "engine", "serve", "--port", str(self.port)]
        cmd += ["--model", model] if model else []
        self.command = " ".join(cmd)
        self._log = open(log, "w")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self._proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log,
                                      stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout_s: float = 600) -> str:
        """The served model's id, once /health says it is loaded."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise SystemExit(f"the server exited ({self._proc.returncode}); see {self._log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=5) as r:
                    return json.load(r)["data"][0]["id"]
            except OSError:
                time.sleep(0.5)
        raise SystemExit(f"the server was not ready in {timeout_s:.0f} s")

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._log.close()


def run_client(name: str, args, env: dict) -> list[dict]:
    file = HERE / CLIENTS[name]
    if name == "node":
        cmd = ["node", str(file)]
        env = {**env, "NODE_PATH": str(Path(args.node_dir) / "node_modules")}
    else:
        cmd = [args.python, str(file)]
    proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=args.client_timeout)
    rows = []
    for line in proc.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    if proc.returncode != 0 or not rows:
        rows.append({"client": name, "version": "?", "check": "(the client ran)",
                     "ok": False, "detail": (proc.stderr or proc.stdout)[-600:].strip()})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.clients", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", default="/tmp/clients-venv/bin/python",
                   help="a Python with the clients installed (not the project's venv)")
    p.add_argument("--node-dir", default="/tmp/clients-node",
                   help="a folder whose node_modules has the `openai` package")
    p.add_argument("--model", default=None, help="the model to serve (default: built-in)")
    p.add_argument("--no-tools-model", action="store_true",
                   help="skip the tool-call checks' second server (tools_model.py)")
    p.add_argument("--clients", default=",".join(CLIENTS),
                   help=f"which to run, of {','.join(CLIENTS)}")
    p.add_argument("--client-timeout", type=float, default=900)
    args = p.parse_args(argv)
    print("#", " ".join(["python -m engine.bench.clients", *(argv or sys.argv[1:])]))
    logs = Path(tempfile.mkdtemp(prefix="tandem-clients-"))
    servers = [Server(args.model, logs / "server.log")]
    env = dict(os.environ)
    if not args.no_tools_model:
        from engine.bench.clients.tools_model import write_tools_model
        folder = write_tools_model(logs)
        servers.append(Server(str(folder), logs / "tools-server.log"))
    try:
        env.update(TANDEM_URL=servers[0].url, TANDEM_MODEL=servers[0].wait_ready())
        if len(servers) > 1:
            env.update(TANDEM_TOOLS_URL=servers[1].url, TANDEM_TOOLS_MODEL=servers[1].wait_ready())
        for s in servers:
            print(f"# server: {s.command}")
        print(f"# model {env['TANDEM_MODEL']}; tools model {env.get('TANDEM_TOOLS_MODEL', '-')}"
              f"; logs in {logs}")
        rows = [r for name in args.clients.split(",") for r in run_client(name, args, env)]
    finally:
        for s in servers:
            s.close()
    return report(rows)


def report(rows: list[dict]) -> int:
    for r in rows:
        mark = {True: "PASS", False: "FAIL", None: "SKIP"}[r["ok"]]
        print(f"{mark}  {r['client']} {r['version']}: {r['check']}"
              + (f"  — {r['detail']}" if r["detail"] else ""))
    counts = {k: sum(r["ok"] is v for r in rows) for k, v in
              (("pass", True), ("fail", False), ("skip", None))}
    print(f"# {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
