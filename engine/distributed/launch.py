"""``python -m engine chat|generate|serve --hosts hosts.json``: one command, N machines.

With --hosts and no MLX_RANK in the environment, the command runs itself again under
mlx.launch with that hosts file (its format: docs/DISTRIBUTED.md), which starts one
process per host (over ssh; locally for 127.0.0.1 entries). In each of those
processes (MLX_RANK set, also when a user runs mlx.launch directly), ``enter``
joins the group: rank 0 goes on to run the command (its engine shards itself:
cluster.py); every other rank loads its shard, follows rank 0, and exits.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys

from engine.config import EngineConfig

PORT_ENV = "TANDEM_DIST_PORT"
HOSTS_HELP = ("run one model over the machines of this mlx.launch hosts file (JSON); "
              "this process becomes rank 0 (docs/DISTRIBUTED.md)")


def add_hosts_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", default=None, metavar="HOSTS_JSON", help=HOSTS_HELP)


def launch_command(hosts: str, argv: list[str]) -> list[str]:
    """The mlx.launch command that runs ``python -m engine <argv>`` (less --hosts) on
    every host of the file; the same Python path on every machine."""
    rest = _without_hosts(argv)
    command = [sys.executable, "-c",
               "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())",
               "--hostfile", hosts, "--python", sys.executable]
    if os.environ.get("PYTHONPATH"):
        command += ["--env", f"PYTHONPATH={os.environ['PYTHONPATH']}"]
    if os.environ.get(PORT_ENV):            # the ring's first port (mlx.launch: 32323)
        command += ["--starting-port", os.environ[PORT_ENV]]
    return command + ["--", "-m", "engine", *rest]


def _without_hosts(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--hosts":
            skip = True
        elif not a.startswith("--hosts="):
            out.append(a)
    return out


def enter(args, argv: list[str]) -> int | None:
    """Before a command runs. Returns an exit status when this process is done (it
    relaunched itself, or it was a follower), None when it goes on as rank 0 (or
    alone)."""
    hosts = getattr(args, "hosts", None)
    if hosts and "MLX_RANK" not in os.environ:
        command = launch_command(hosts, argv)
        print(f"tandem: {shlex.join(command)}", file=sys.stderr)
        os.execv(command[0], command)          # does not return
    if "MLX_RANK" not in os.environ:
        return None
    from engine.distributed import cluster as dist
    group = dist.connect()
    if group is None:
        return None
    if group.rank == 0:
        dist.join(group)
        return None
    return dist.run_follower(getattr(args, "model", None), follower_config(args), group)


def follower_config(args) -> EngineConfig:
    """The engine settings that shape a follower's runner, as rank 0's command line
    sets them (rank 0 checks the pool's layout in its start message)."""
    return EngineConfig(min_stream_tok_s=getattr(args, "reading_pace",
                                                 EngineConfig.min_stream_tok_s))
