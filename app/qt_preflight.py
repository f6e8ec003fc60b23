"""Before Qt starts: does this Linux machine have the system libraries that Qt's
display plugin needs? Qt itself only aborts ("could not load the Qt platform
plugin xcb") without naming them; here `ldd` names them, a small table turns the
sonames into Debian/Ubuntu packages, and the user gets the one command to run.

Runs without importing Qt (it only inspects files), so that `make run` can call
it as a script (`python app/qt_preflight.py`) even where Qt cannot load at all.
Exit status: 0 ready (or nothing to check), 1 libraries missing, 2 no display.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# soname -> Debian/Ubuntu package (bookworm and Ubuntu 22.04/24.04 use these names;
# on 24.04 some are "...t64" packages that provide the old name, so apt accepts it).
DEBIAN_PACKAGES: dict[str, str] = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libXau.so.6": "libxau6",
    "libXdmcp.so.6": "libxdmcp6",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libGLX.so.0": "libglx0",
    "libOpenGL.so.0": "libopengl0",
    "libGLdispatch.so.0": "libglvnd0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libpng16.so.16": "libpng16-16",
    "libharfbuzz.so.0": "libharfbuzz0b",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libgobject-2.0.so.0": "libglib2.0-0",
    "libdbus-1.so.3": "libdbus-1-3",
    "libexpat.so.1": "libexpat1",
    "libbrotlidec.so.1": "libbrotli1",
    "libbrotlicommon.so.1": "libbrotli1",
    "libz.so.1": "zlib1g",
    "libzstd.so.1": "libzstd1",
    "libpcre2-8.so.0": "libpcre2-8-0",
    "libbsd.so.0": "libbsd0",
    "libmd.so.0": "libmd0",
    "libstdc++.so.6": "libstdc++6",
    "libgcc_s.so.1": "libgcc-s1",
}

# Qt's display plugins and the Qt libraries the app loads (QtWidgets pulls QtGui).
_PLUGINS = {"xcb": "libqxcb.so", "wayland": "libqwayland.so"}
_QT_LIBS = ("libQt6Widgets.so.6", "libQt6Gui.so.6", "libQt6DBus.so.6")
_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")


@dataclass(frozen=True)
class Report:
    """What the check found, and the text to show the user."""
    status: int        # 0 ready / nothing to check, 1 libraries missing, 2 no display
    message: str = ""


def missing_sonames(ldd_output: str) -> list[str]:
    """Sonames `ldd` could not resolve, in first-seen order, each once."""
    found: dict[str, None] = {}
    for line in ldd_output.splitlines():
        m = _NOT_FOUND.match(line)
        if m:
            found.setdefault(m.group(1))
    return list(found)


def debian_packages(sonames: list[str]) -> tuple[list[str], list[str]]:
    """(packages to install, sonames the table does not know), both in order, no repeats."""
    packages: dict[str, None] = {}
    unknown: list[str] = []
    for name in sonames:
        if name in DEBIAN_PACKAGES:
            packages.setdefault(DEBIAN_PACKAGES[name])
        else:
            unknown.append(name)
    return list(packages), unknown


def is_debian_like(os_release: str) -> bool:
    """True for Debian, Ubuntu and their derivatives (ID or ID_LIKE in /etc/os-release)."""
    ids: list[str] = []
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids += value.strip().strip('"').split()
    return any(i in ("debian", "ubuntu") for i in ids)


def platforms_to_check(env: dict[str, str]) -> list[str] | None:
    """Display plugins Qt would try here, in its order; [] when none needs checking
    (offscreen, minimal, vnc, ...); None when the one it would use has no display."""
    chosen = env.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if chosen and chosen not in _PLUGINS:
        return []
    displays = {"wayland": env.get("WAYLAND_DISPLAY"), "xcb": env.get("DISPLAY")}
    wanted = [p for p in ([chosen] if chosen else ["wayland", "xcb"]) if displays[p]]
    return wanted or None


def is_root() -> bool:
    """Running as root (a container, a chroot): there is often no sudo, nor any need."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def format_missing(sonames: list[str], debian: bool, root: bool | None = None) -> str:
    """The message for missing libraries: one install command where we can name one,
    with sudo unless we already run as root (``root``: None asks the process)."""
    sudo = "" if (is_root() if root is None else root) else "sudo "
    lines = ["Qt cannot open a window: these system libraries are missing:",
             "  " + " ".join(sonames)]
    if debian:
        packages, unknown = debian_packages(sonames)
        if packages:
            lines += ["Install them with:", f"  {sudo}apt-get install " + " ".join(packages)]
        if unknown:
            lines.append("Find the package for the others with `apt-file search NAME`: "
                         + " ".join(unknown))
    else:
        lines.append("Install the packages that provide them (README: Prerequisites), "
                     "e.g. on Fedora `sudo dnf provides '*/NAME'` names the package.")
    return "\n".join(lines)


NO_DISPLAY = ("No display: neither DISPLAY nor WAYLAND_DISPLAY is set, so Qt cannot open "
              "a window. Run Tandem inside a desktop session (or over `ssh -X`), or "
              "QT_QPA_PLATFORM=offscreen for a window nobody sees.")


def qt_dir() -> Path | None:
    """PySide6's Qt folder, found without importing PySide6 (None if not installed)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "Qt"


def ldd(path: Path) -> str:
    """`ldd PATH`'s output ("" when ldd is not there or fails)."""
    exe = shutil.which("ldd")
    if exe is None:
        return ""
    done = subprocess.run([exe, str(path)], capture_output=True, text=True, check=False)
    return done.stdout


def _missing_for(qt: Path, plugin: str) -> list[str]:
    """Sonames the plugin and the Qt libraries the app loads cannot find."""
    files = [qt / "plugins" / "platforms" / _PLUGINS[plugin]]
    files += [qt / "lib" / name for name in _QT_LIBS]
    return missing_sonames("\n".join(ldd(f) for f in files if f.exists()))


def check(env: dict[str, str] | None = None, platform: str = sys.platform) -> Report:
    """The whole check for this machine (Linux only; elsewhere Qt brings what it needs)."""
    env = dict(os.environ if env is None else env)
    if not platform.startswith("linux"):
        return Report(0)
    plugins = platforms_to_check(env)
    if plugins is None:
        return Report(2, NO_DISPLAY)
    qt = qt_dir()
    if not plugins or qt is None:
        return Report(0)
    # Qt falls back from one plugin to the next: ready if any of them loads.
    missing = [_missing_for(qt, p) for p in plugins]
    if not all(missing):
        return Report(0)
    missing = list(dict.fromkeys(name for names in missing for name in names))
    release = Path("/etc/os-release")
    debian = release.exists() and is_debian_like(release.read_text(errors="replace"))
    return Report(1, format_missing(missing, debian))


def main() -> int:
    report = check()
    if report.message:
        print(report.message, file=sys.stderr)
    return report.status


if __name__ == "__main__":
    sys.exit(main())
