"""The Qt preflight: parsing ldd, naming Debian packages, choosing what to check.
Fixture strings only: nothing here depends on what this machine has installed."""
from __future__ import annotations

from pathlib import Path

import pytest

from app import qt_preflight as qp

# `ldd libqxcb.so` on a Debian 12 minbase chroot (trimmed); a soname can repeat.
LDD_MINIMAL = """\
\tlinux-vdso.so.1 (0x00007ffd5c1f0000)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibGL.so.1 => not found
\tlibxkbcommon.so.0 => not found
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f9a1c200000)
\tlibxcb-keysyms.so.1 => not found
\tlibfontconfig.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibmystery.so.3 => not found
\t/lib64/ld-linux-x86-64.so.2 (0x00007f9a1c9e5000)
"""

LDD_COMPLETE = """\
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007f)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)
"""


def test_missing_sonames_in_order_once_each():
    assert qp.missing_sonames(LDD_MINIMAL) == [
        "libGL.so.1", "libxkbcommon.so.0", "libxcb-cursor.so.0", "libxcb-icccm.so.4",
        "libxcb-keysyms.so.1", "libfontconfig.so.1", "libmystery.so.3"]
    assert qp.missing_sonames(LDD_COMPLETE) == []
    assert qp.missing_sonames("") == []


def test_sonames_map_to_debian_packages_and_unknown_ones_are_kept():
    packages, unknown = qp.debian_packages(
        ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1",
         "libglib-2.0.so.0", "libgthread-2.0.so.0", "libmystery.so.3"])
    assert packages == ["libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libglib2.0-0"]
    assert unknown == ["libmystery.so.3"]


def test_debian_message_is_one_apt_command():
    text = qp.format_missing(qp.missing_sonames(LDD_MINIMAL), debian=True, root=False)
    commands = [line.strip() for line in text.splitlines() if "apt-get" in line]
    assert commands == ["sudo apt-get install libgl1 libxkbcommon0 libxcb-cursor0 "
                        "libxcb-icccm4 libxcb-keysyms1 libfontconfig1"]
    assert "apt-file search" in text and "libmystery.so.3" in text


@pytest.mark.parametrize("euid, prefix", [(0, "apt-get"), (1000, "sudo apt-get")])
def test_as_root_the_command_has_no_sudo(monkeypatch, euid, prefix):
    """Root (a container, a chroot) often has no sudo: the line must run as printed."""
    monkeypatch.setattr(qp.os, "geteuid", lambda: euid)
    text = qp.format_missing(["libxcb-cursor.so.0"], debian=True)
    assert [line.strip() for line in text.splitlines() if "apt-get" in line] == [
        prefix + " install libxcb-cursor0"]


def test_other_distros_get_the_sonames_not_apt():
    text = qp.format_missing(["libxcb-cursor.so.0"], debian=False)
    assert "libxcb-cursor.so.0" in text and "apt-get" not in text


@pytest.mark.parametrize("release, debian", [
    ('ID=debian\nVERSION_ID="12"\n', True),
    ('ID=ubuntu\nID_LIKE=debian\n', True),
    ('ID=linuxmint\nID_LIKE="ubuntu debian"\n', True),
    ('ID=fedora\n', False),
    ('ID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"\n', False),
])
def test_debian_like_from_os_release(release, debian):
    assert qp.is_debian_like(release) is debian


@pytest.mark.parametrize("env, plugins", [
    ({"DISPLAY": ":0"}, ["xcb"]),
    ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, ["wayland", "xcb"]),
    ({"QT_QPA_PLATFORM": "offscreen"}, []),
    ({"QT_QPA_PLATFORM": "minimal"}, []),
    ({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":1", "WAYLAND_DISPLAY": "w"}, ["xcb"]),
    ({"QT_QPA_PLATFORM": "wayland;xcb", "WAYLAND_DISPLAY": "w"}, ["wayland"]),
    ({"QT_QPA_PLATFORM": "xcb"}, None),
    ({}, None),
])
def test_which_plugins_to_check(env, plugins):
    assert qp.platforms_to_check(env) == plugins


def test_no_display_is_said_and_macos_is_skipped():
    report = qp.check(env={}, platform="linux")
    assert report.status == 2 and "No display" in report.message
    assert qp.check(env={}, platform="darwin") == qp.Report(0)
    assert qp.check(env={"QT_QPA_PLATFORM": "offscreen"}, platform="linux") == qp.Report(0)


def test_check_reports_missing_when_no_plugin_resolves(monkeypatch, tmp_path):
    (tmp_path / "plugins" / "platforms").mkdir(parents=True)
    (tmp_path / "plugins" / "platforms" / "libqxcb.so").write_bytes(b"")
    monkeypatch.setattr(qp, "qt_dir", lambda: tmp_path)
    outputs = {"libqxcb.so": LDD_MINIMAL}
    monkeypatch.setattr(qp, "ldd", lambda path: outputs.get(Path(path).name, ""))
    report = qp.check(env={"DISPLAY": ":0"}, platform="linux")
    assert report.status == 1 and "libxcb-cursor.so.0" in report.message
    outputs["libqxcb.so"] = LDD_COMPLETE
    assert qp.check(env={"DISPLAY": ":0"}, platform="linux") == qp.Report(0)
