"""The packaging recipe, for real: build the bundle with packaging/build.py into a temporary
folder, check what is inside, and run the bundled executable's --self-test offscreen.

Linux builds the one-folder bundle (what CI runs); on a Mac the same test builds
Tandem.app (signed ad hoc, not zipped) and runs Contents/MacOS/Tandem.
"""
from __future__ import annotations

import importlib.util
import os
import plistlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packaging"))
import bundle_config as cfg

IS_MAC = sys.platform == "darwin"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("PyInstaller") is None,
    reason="PyInstaller is not installed (pip install -e '.[package]')")

# Python modules that must not be in the bundle (heavy, bench-only or unused).
FORBIDDEN_MODULES = ("mlx_lm", "transformers", "torch", "tkinter", "PySide6.QtWebEngineCore",
                     "PySide6.QtQml", "PySide6.QtMultimedia", "pytest", "engine.bench", "kernels.bench")
# Files that must not be in the bundle (path fragments).
FORBIDDEN_FILES = ("WebEngine", "Qt6Qml", "Qt6Quick", "Qt6Pdf", "Qt6Multimedia", "wayland",
                   "libqgtk3", "imageformats", "translations", "_tkinter")


def _require_model_package() -> None:
    if importlib.util.find_spec(cfg.MODEL_PACKAGE) is None:
        pytest.skip("built-in model not installed (make test installs it)")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """(bundle folder, executable, seconds the build took)."""
    _require_model_package()            # the recipe refuses to build a bundle without it
    dist = tmp_path_factory.mktemp("dist")
    work = tmp_path_factory.mktemp("work")
    out = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), "--dist", str(dist),
                          "--work", str(work), "--no-zip"],
                         check=False, capture_output=True, text=True, timeout=900, cwd=str(ROOT))
    assert out.returncode == 0, f"build failed:\n{out.stdout[-4000:]}\n{out.stderr[-8000:]}"
    if IS_MAC:
        app = dist / f"{cfg.APP_NAME}.app"
        yield app, app / "Contents" / "MacOS" / cfg.APP_NAME
    else:
        yield dist / cfg.APP_NAME, dist / cfg.APP_NAME / cfg.APP_NAME
    for folder in (dist, work):                 # ~200 MB each run: do not keep them in /tmp
        shutil.rmtree(folder, ignore_errors=True)


def _files(folder: Path) -> list[str]:
    return [p.relative_to(folder).as_posix() for p in folder.rglob("*")]


def _bundled_modules(exe: Path) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "PyInstaller.utils.cliutils.archive_viewer",
                          "-r", "-b", str(exe)], check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {line.strip().strip("'") for line in out.stdout.splitlines()}


def _clean_env(tmp: Path) -> dict:
    """Nothing from this checkout or the user's folders: only the bundle, a fresh home
    and an empty data folder (no models folder, no Hugging Face cache, no env var)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QT_", "XDG_", "TANDEM_", "HF_"))}
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp / name.lower())
    env.update(QT_QPA_PLATFORM="offscreen", TANDEM_DATA_DIR=str(tmp / "data"),
               HOME=str(tmp / "home"))
    return env


def test_bundled_app_passes_its_self_test_with_an_empty_data_folder(bundle, tmp_path):
    """What a double-clicked app on a machine that never saw the source tree does: no
    flags, no env var, nothing in any data folder; it finds the model it carries."""
    _require_model_package()
    folder, exe = bundle
    env = _clean_env(tmp_path)
    out = subprocess.run([str(exe), "--self-test"], check=False, capture_output=True, text=True,
                         timeout=600, cwd=str(tmp_path), env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    detail = f"exit {out.returncode}\nstdout:\n{out.stdout[-2000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, detail
    assert lines and re.match(r"self-test ok: .*max batch [2-9]", lines[-1]), detail
    written = [p for p in tmp_path.rglob("*.gguf")]
    assert not written, f"the model came from outside the bundle: {written}"


def test_the_bundle_carries_the_built_in_model(bundle):
    _require_model_package()
    folder, _ = bundle
    [(source, _)] = cfg.model_datas()
    internal = (folder / "Contents" / "Frameworks") if IS_MAC else (folder / "_internal")
    bundled = internal / cfg.MODEL_DIR / Path(source).name
    assert bundled.is_file() and bundled.stat().st_size == Path(source).stat().st_size


def test_bundle_holds_engine_ui_and_resources(bundle):
    folder, _ = bundle
    files = _files(folder)
    need = [r"(^|/)resources/tandem\.qss$", r"(^|/)resources/themes/dark\.json$",
            r"(^|/)tokenizers/tokenizers[^/]*\.(so|pyd)$",
            r"(^|/)mlx/core[^/]*\.so$", r"(^|/)PySide6/Qt/plugins/platforms/libq(offscreen|cocoa)"]
    if IS_MAC:
        need += [r"(^|/)mlx/lib/libmlx\.dylib$", r"(^|/)mlx/lib/mlx\.metallib$",
                 r"(^|/)PySide6/Qt/plugins/platforms/libqcocoa\.dylib$",
                 r"^Contents/Resources/tandem\.icns$"]
    else:
        need += [r"(^|/)mlx/lib/libmlx\.so$", r"(^|/)mlx_cpu\.libs/libblas",
                 r"(^|/)PySide6/Qt/plugins/platforms/libqxcb\.so$"]
    missing = [pat for pat in need if not any(re.search(pat, f) for f in files)]
    assert not missing, f"not in the bundle: {missing}"
    # app/style.py finds the style sheet at <package root>/resources; frozen, that is the
    # folder holding the app package (sys._MEIPASS).
    internal = (folder / "Contents" / "Frameworks") if IS_MAC else (folder / "_internal")
    assert (internal / "resources" / "tandem.qss").is_file()


def test_bundle_leaves_out_unused_modules_and_plugins(bundle):
    folder, exe = bundle
    modules = _bundled_modules(exe)
    assert "engine.models.llama" in modules and "kernels.kernel_set" in modules
    present = sorted(m for m in modules for bad in FORBIDDEN_MODULES
                     if m == bad or m.startswith(bad + "."))
    assert not present, f"should not be bundled: {present[:20]}"
    files = [f for f in _files(folder) if any(bad in f for bad in FORBIDDEN_FILES)]
    assert not files, f"should not be bundled: {files[:20]}"


@pytest.mark.skipif(sys.platform != "linux", reason="ldd is Linux's")
def test_bundled_qt_plugins_find_their_libraries(bundle):
    """Every library a bundled Qt plugin links to resolves as well as in the source tree
    (the recipe drops Qt libraries; it must not drop one a kept plugin needs)."""
    import PySide6
    folder, _ = bundle
    source_plugins = Path(PySide6.__file__).parent / "Qt" / "plugins"
    plugins = sorted((folder / "_internal" / "PySide6" / "Qt" / "plugins").rglob("*.so"))
    assert plugins
    for plugin in plugins:
        source = source_plugins / plugin.parent.name / plugin.name
        lost = _unresolved(plugin) - _unresolved(source)
        assert not lost, f"{plugin.name}: {sorted(lost)} not found in the bundle"


def test_mac_info_plist(bundle):
    if not IS_MAC:
        pytest.skip("Tandem.app is built on macOS only")
    folder, _ = bundle
    with open(folder / "Contents" / "Info.plist", "rb") as f:
        plist = plistlib.load(f)
    assert plist["CFBundleIdentifier"] == cfg.BUNDLE_ID
    assert plist["CFBundleShortVersionString"] == cfg.project_version()
    assert plist["LSMinimumSystemVersion"] == cfg.MIN_MACOS
    assert plist["NSHighResolutionCapable"] is True
    assert plist["CFBundleIconFile"].startswith("tandem")
    subprocess.run(["codesign", "--verify", "--deep", "--strict", str(folder)], check=True)


def _unresolved(lib: Path) -> set[str]:
    out = subprocess.run(["ldd", str(lib)], check=False, capture_output=True, text=True, timeout=60)
    return {line.split("=>")[0].strip() for line in out.stdout.splitlines() if "not found" in line}
