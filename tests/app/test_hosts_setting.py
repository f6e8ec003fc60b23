"""Settings > Several machines: the hosts file, the check that each host answers (on a
worker thread; its result arrives as a signal) and the command the user runs."""
from __future__ import annotations

import json
import threading

from app.storage.app_settings import AppSettings
from app.windows.hosts_group import HostsGroup
from app.windows.settings_dialog import SettingsDialog
from engine.distributed.hosts_file import HostCheck


class HeldCheck:
    """A check that answers only when the test releases it, recording its calls."""

    def __init__(self, outcome):
        self.outcome, self.asked, self.release = outcome, [], threading.Event()

    def __call__(self, path: str):
        self.asked.append(path)
        self.release.wait(30)
        return self.outcome


def _dialog(qtbot, check, hosts_file="/tmp/hosts.json", model="/models/qwen"):
    dialog = SettingsDialog(AppSettings(hosts_file=hosts_file),
                            hosts=HostsGroup(hosts_file, model, check))
    qtbot.addWidget(dialog)
    return dialog, dialog.hosts


def test_check_reports_each_host_in_order_of_events(qtbot):
    check = HeldCheck([HostCheck(0, "mac-a.local", ()),
                       HostCheck(1, "mac-b.local", ("ssh mac-b.local: port 22 refused",))])
    dialog, hosts = _dialog(qtbot, check)
    events = []
    hosts.checkStarted.connect(lambda: events.append(("started",
                                                      hosts.check_button.isEnabled())))
    hosts.checked.connect(lambda out: events.append(("checked", len(out))))
    with qtbot.waitSignal(hosts.checkStarted):
        hosts.check_button.click()
    assert not hosts.check_button.isEnabled()          # one check at a time
    assert hosts.result.text().startswith("Asking each host in /tmp/hosts.json")
    with qtbot.waitSignal(hosts.checked, timeout=10_000):
        check.release.set()
    assert events == [("started", False), ("checked", 2)]
    assert check.asked == ["/tmp/hosts.json"]
    assert hosts.check_button.isEnabled()
    assert hosts.result.text().splitlines() == [
        "1 of 2 hosts failed:", "rank 0 mac-a.local: answers",
        "rank 1 mac-b.local: ssh mac-b.local: port 22 refused"]


def test_a_bad_file_shows_what_is_wrong(qtbot):
    check = HeldCheck("/tmp/hosts.json is not JSON: Expecting value.")
    check.release.set()
    _, hosts = _dialog(qtbot, check)
    with qtbot.waitSignal(hosts.checked, timeout=10_000):
        hosts.check_button.click()
    assert hosts.result.text() == "/tmp/hosts.json is not JSON: Expecting value."


def test_a_result_for_a_file_no_longer_chosen_is_dropped(qtbot):
    check = HeldCheck([HostCheck(0, "old", ("ssh old: the name does not resolve",))])
    _, hosts = _dialog(qtbot, check)
    hosts.check_button.click()
    hosts.path.setText("/tmp/other.json")
    assert not hosts.check_button.isEnabled()          # the first check is still out
    with qtbot.waitSignal(hosts.checked, timeout=10_000):
        check.release.set()
    assert hosts.result.text() == "" and hosts.check_button.isEnabled()


def test_the_file_is_kept_and_the_command_names_it(qtbot):
    dialog, hosts = _dialog(qtbot, HeldCheck([]))
    assert "python -m engine serve --model /models/qwen --hosts /tmp/hosts.json" \
        in hosts.command.text()
    hosts.path.setText("/home/me/two macs.json")
    assert "--hosts '/home/me/two macs.json'" in hosts.command.text()
    out = dialog.settings()
    assert out.hosts_file == "/home/me/two macs.json"
    assert AppSettings.from_dict(out.to_dict()).hosts_file == "/home/me/two macs.json"
    hosts.path.setText("")
    assert not hosts.check_button.isEnabled() and dialog.settings().hosts_file == ""


def test_the_real_check_on_local_hosts(qtbot, tmp_path):
    """The default check reads the file and asks each host (127.0.0.1: runs locally)."""
    path = tmp_path / "hosts.json"
    local = {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}
    path.write_text(json.dumps({"backend": "ring", "hosts": [local, local]}))
    dialog = SettingsDialog(AppSettings(hosts_file=str(path)))
    qtbot.addWidget(dialog)
    with qtbot.waitSignal(dialog.hosts.checked, timeout=10_000):
        dialog.hosts.check_button.click()
    assert dialog.hosts.result.text().splitlines()[0] == "All 2 hosts answer."
