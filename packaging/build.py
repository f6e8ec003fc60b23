"""Build the Tandem app with PyInstaller: `python packaging/build.py [--dist DIR]`.

macOS: DIST/Tandem.app, signed (ad hoc unless --sign "Developer ID Application: ..."),
and DIST/Tandem-<version>-macos-<arch>.zip. Linux: DIST/Tandem/ (one folder; run
DIST/Tandem/Tandem). Needs the `package` extra: `pip install -e ".[package]"`.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bundle_config as cfg

SPEC = HERE / "tandem.spec"
ENTITLEMENTS = HERE / "entitlements.plist"


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python packaging/build.py", description=__doc__.split("\n")[0])
    parser.add_argument("--dist", type=Path, default=cfg.ROOT / "dist",
                        help="where the app goes (default: dist/)")
    parser.add_argument("--work", type=Path, default=None,
                        help="PyInstaller's work folder (default: build/pyinstaller)")
    parser.add_argument("--no-zip", action="store_true", help="macOS: skip the .zip")
    parser.add_argument("--sign", default="-", metavar="IDENTITY",
                        help='macOS: codesign identity (default "-": ad hoc); a Developer ID '
                             "adds the hardened runtime, a timestamp and packaging/entitlements.plist")
    return parser.parse_args(argv)


def run(cmd: list, env: dict | None = None) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, env=env)


def pyinstaller(dist: Path, work: Path, identity: str) -> None:
    run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
         "--distpath", dist, "--workpath", work, SPEC],
        env=dict(os.environ, TANDEM_CODESIGN_IDENTITY=identity))


def sign_and_zip(app: Path, identity: str, zip_it: bool) -> Path | None:
    # Ad hoc runs on this Mac, and on others after right-click > Open; notarization
    # needs a Developer ID (docs/PACKAGING.md).
    extra = [] if identity == "-" else ["--options", "runtime", "--timestamp",
                                        "--entitlements", ENTITLEMENTS]
    run(["codesign", "--force", "--deep", *extra, "--sign", identity, app])
    run(["codesign", "--verify", "--deep", "--strict", app])
    if not zip_it:
        return None
    archive = app.parent / f"{cfg.APP_NAME}-{cfg.project_version()}-macos-{platform.machine()}.zip"
    archive.unlink(missing_ok=True)
    run(["ditto", "-c", "-k", "--keepParent", app, archive])
    return archive


def strip_libpython(folder: Path) -> None:
    """Linux: libpython may carry ~19 MB of debug info; other libraries are left alone
    (stripping numpy's patched OpenBLAS breaks it)."""
    if shutil.which("strip") is None:
        return
    for lib in folder.glob("_internal/libpython3*.so*"):
        if not lib.is_symlink():
            run(["strip", "--strip-debug", lib])


def folder_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    dist = args.dist.resolve()
    work = (args.work or cfg.ROOT / "build" / "pyinstaller").resolve()
    t0 = time.monotonic()
    pyinstaller(dist, work, args.sign)
    if sys.platform == "darwin":
        app = dist / f"{cfg.APP_NAME}.app"
        shutil.rmtree(dist / cfg.APP_NAME, ignore_errors=True)   # the unbundled copy
        archive = sign_and_zip(app, args.sign, not args.no_zip)
        exe = app / "Contents" / "MacOS" / cfg.APP_NAME
    else:
        app = dist / cfg.APP_NAME
        strip_libpython(app)
        archive = None
        exe = app / cfg.APP_NAME
    print(f"built {app} ({folder_size(app) / 2**20:.0f} MiB) in {time.monotonic() - t0:.0f} s")
    if archive:
        print(f"zipped {archive} ({archive.stat().st_size / 2**20:.0f} MiB)")
    print(f"try it: {exe} --self-test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
