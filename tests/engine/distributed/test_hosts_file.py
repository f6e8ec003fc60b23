"""The hosts file check (engine/distributed/hosts_file.py): parsing mlx.launch's
format and asking each host, with local sockets standing in for the ssh ports."""
from __future__ import annotations

import json
import socket

import pytest

from engine.distributed.hosts_file import HostsFile, HostsFileError, check_hosts


def _listening() -> socket.socket:
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(4)
    return server


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]          # nothing listens there once closed


def test_reads_both_forms_of_mlx_launch_hosts_files(tmp_path):
    hosts = [{"ssh": "mac-a.local", "ips": ["10.0.0.1"]},
             {"ssh": "mac-b.local", "ips": ["10.0.0.2"]}]
    (tmp_path / "a.json").write_text(json.dumps({"backend": "ring", "hosts": hosts}))
    (tmp_path / "b.json").write_text(json.dumps(hosts))
    a, b = HostsFile.read(tmp_path / "a.json"), HostsFile.read(tmp_path / "b.json")
    assert a.backend == "ring" and b.backend == ""
    assert [h.ssh for h in a.hosts] == [h.ssh for h in b.hosts] == ["mac-a.local",
                                                                    "mac-b.local"]
    assert a.hosts[1].ips == ("10.0.0.2",)


@pytest.mark.parametrize("text, says", [
    ("not json", "is not JSON"),
    ('{"hosts": [{"ssh": "a"}]}', "at least two hosts"),
    ('{"hosts": [{"ips": ["1.2.3.4"]}, {"ssh": "b"}]}', '"ssh": NAME'),
    ('{"backend": "tcp", "hosts": [{"ssh": "a"}, {"ssh": "b"}]}', "Unknown backend"),
])
def test_a_malformed_file_says_what_is_wrong(tmp_path, text, says):
    path = tmp_path / "hosts.json"
    path.write_text(text)
    with pytest.raises(HostsFileError, match=says):
        HostsFile.read(path)
    with pytest.raises(HostsFileError, match="Cannot read"):
        HostsFile.read(tmp_path / "missing.json")


def test_each_host_says_what_failed():
    """Rank 0 answers, rank 1's port refuses, rank 2's name does not resolve, rank 3
    runs locally (no ssh) but the ring needs its ips."""
    server = _listening()
    port = server.getsockname()[1]
    with server:
        up = HostsFile.from_json({"backend": "ring", "hosts": [
            {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]},
            {"ssh": "localhost", "ips": ["127.0.0.1"]}]})
        [local, answered] = check_hosts(up, timeout_s=2.0, ssh_port=port)
        assert local.ok and answered.ok, (local, answered)
        assert answered.line() == "rank 1 localhost: answers"
    hosts = HostsFile.from_json({"backend": "ring", "hosts": [
        {"ssh": "localhost", "ips": ["127.0.0.1"]},
        {"ssh": "no-such-host.invalid", "ips": ["127.0.0.1"]},
        {"ssh": "127.0.0.1"}]})
    refused, unknown, no_ips = check_hosts(hosts, timeout_s=2.0, ssh_port=_closed_port())
    assert "refused" in refused.line() and "ip 127.0.0.1" in refused.line()
    assert "ssh no-such-host.invalid: the name does not resolve" in unknown.line()
    assert no_ips.problems == ('no "ips" (the ring backend needs an address for each host)',)


def test_jaccl_needs_an_rdma_device_for_every_other_host():
    hosts = HostsFile.from_json({"backend": "jaccl", "hosts": [
        {"ssh": "127.0.0.1", "ips": ["127.0.0.1"], "rdma": [None, "rdma_en3"]},
        {"ssh": "127.0.0.1", "ips": ["127.0.0.1"], "rdma": ["rdma_en3"]}]})
    ok, short = check_hosts(hosts)
    assert ok.ok and "lists 1 devices, not one per host (2)" in short.line()
