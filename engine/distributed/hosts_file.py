"""The hosts file of ``mlx.launch --hostfile`` (docs/DISTRIBUTED.md), read and checked.

No mlx, no Qt: the app's Settings use it, and so can a terminal. ``check_hosts``
asks each host, at once and with a short timeout, what a launch needs of it before
anything starts:

- its ssh name resolves and its ssh port answers (mlx.launch starts each rank over
  ssh; a host named ``127.0.0.1`` runs locally, without ssh);
- for the ring backend, each of its ``ips`` answers on that ssh port too (the ring's
  TCP links go over those addresses; the ring's own ports only listen once the ranks
  run, so a connection to them now proves nothing);
- for JACCL, its ``rdma`` list names a device for every other host.

ssh's own settings (``~/.ssh/config``: HostName, Port) are applied through ``ssh -G``
where ssh exists. A passing check does not prove passwordless ssh or the same Python
and model path on every machine: the launch itself says so.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

LOCAL = "127.0.0.1"
SSH_PORT = 22
BACKENDS = ("ring", "jaccl", "jaccl-ring", "nccl", "mpi", "")


class HostsFileError(ValueError):
    """The file is not an mlx.launch hosts file: the message says what is wrong."""


@dataclass(frozen=True)
class Host:
    ssh: str
    ips: tuple[str, ...] = ()
    rdma: tuple = ()


@dataclass(frozen=True)
class HostsFile:
    hosts: tuple[Host, ...]
    backend: str = ""
    envs: tuple[str, ...] = field(default=())

    def __post_init__(self):
        if len(self.hosts) < 2:
            raise HostsFileError("A hosts file names at least two hosts (one per rank).")
        if self.backend not in BACKENDS:
            raise HostsFileError(f"Unknown backend {self.backend!r}: one of "
                                 f"{', '.join(b for b in BACKENDS if b)}.")

    @classmethod
    def read(cls, path: str | Path) -> HostsFile:
        try:
            data = json.loads(Path(path).expanduser().read_text())
        except OSError as e:
            raise HostsFileError(f"Cannot read {path}: {e.strerror or e}.") from e
        except ValueError as e:
            raise HostsFileError(f"{path} is not JSON: {e}.") from e
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data) -> HostsFile:
        """mlx.launch's forms: {"backend", "envs", "hosts": [...]} or the bare list."""
        backend, envs, hosts = "", (), data
        if isinstance(data, dict):
            backend, envs = data.get("backend", ""), tuple(data.get("envs", ()))
            hosts = data.get("hosts")
        if not isinstance(hosts, list) or not all(
                isinstance(h, dict) and isinstance(h.get("ssh"), str) and h["ssh"]
                for h in hosts):
            raise HostsFileError('The hosts must be a list of {"ssh": NAME, "ips": [...]} '
                                 "objects, one per rank.")
        return cls(tuple(Host(h["ssh"], tuple(h.get("ips") or ()), tuple(h.get("rdma") or ()))
                         for h in hosts), backend, envs)


@dataclass(frozen=True)
class HostCheck:
    rank: int
    host: str
    problems: tuple[str, ...]         # empty: the host answered everything asked

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        return (f"rank {self.rank} {self.host}: "
                + ("answers" if self.ok else "; ".join(self.problems)))


def check_hosts(hosts: HostsFile, timeout_s: float = 2.0,
                ssh_port: int | None = None) -> list[HostCheck]:
    """One HostCheck per host, in rank order, all hosts asked at once. Bounded: ssh -G
    and each address take at most timeout_s; a name lookup has no timeout of its own,
    so a host still not done after all of those is reported as such. ssh_port: the
    port to try instead of ssh's own setting (tests)."""
    limit = timeout_s * (2 + max(len(h.ips) for h in hosts.hosts)) + 1
    pool = ThreadPoolExecutor(max_workers=min(16, len(hosts.hosts)))
    futures = [pool.submit(_check, r, h, hosts, timeout_s, ssh_port)
               for r, h in enumerate(hosts.hosts)]
    wait(futures, timeout=limit)
    pool.shutdown(wait=False)
    return [f.result() if f.done() else
            HostCheck(r, h.ssh, (f"no answer within {limit:g} s (name lookup?)",))
            for r, (f, h) in enumerate(zip(futures, hosts.hosts))]


def _check(rank: int, host: Host, hosts: HostsFile, timeout_s: float,
           ssh_port: int | None) -> HostCheck:
    problems = list(_layout_problems(rank, host, hosts))
    if host.ssh == LOCAL:
        targets = []                   # mlx.launch runs it here, no ssh
    else:
        name, port = _ssh_target(host.ssh, timeout_s)
        targets = [(f"ssh {name}", name, ssh_port or port)]
    if hosts.backend in ("ring", "") and host.ssh != LOCAL:
        port = ssh_port or targets[0][2]
        targets += [(f"ip {ip}", ip, port) for ip in host.ips]
    problems += [p for label, name, port in targets
                 if (p := _answers(label, name, port, timeout_s))]
    return HostCheck(rank, host.ssh, tuple(problems))


def _layout_problems(rank: int, host: Host, hosts: HostsFile):
    if hosts.backend in ("ring", "") and not host.ips:
        yield 'no "ips" (the ring backend needs an address for each host)'
    if hosts.backend.startswith("jaccl"):
        n = len(hosts.hosts)
        if len(host.rdma) != n:
            yield f'"rdma" lists {len(host.rdma)} devices, not one per host ({n})'
        elif host.rdma[rank] is not None:
            yield f'"rdma" entry {rank} (this host itself) must be null'


def _ssh_target(name: str, timeout_s: float) -> tuple[str, int]:
    """(host name, port) that ssh would connect to for `name` (user@ and ssh_config
    applied where ssh exists)."""
    host, port = name.rsplit("@", 1)[-1], SSH_PORT
    if shutil.which("ssh"):
        try:
            out = subprocess.run(["ssh", "-G", name], capture_output=True, text=True,
                                 timeout=timeout_s).stdout
            conf = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
            host, port = conf.get("hostname", host), int(conf.get("port", port))
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    return host, port


def _answers(label: str, name: str, port: int, timeout_s: float) -> str | None:
    """None when name:port accepts a TCP connection within timeout_s, else why not."""
    try:
        with socket.create_connection((name, port), timeout=timeout_s):
            return None
    except socket.gaierror:
        return f"{label}: the name does not resolve"
    except TimeoutError:
        return f"{label}: no answer on port {port} within {timeout_s:g} s"
    except ConnectionRefusedError:
        return f"{label}: port {port} refused (is Remote Login / sshd on?)"
    except OSError as e:
        return f"{label}: port {port}: {e.strerror or e}"
