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


def _default_model() -> Path:
    from engine.errors import DefaultModelMissingError
    from engine.loading.default_model import default_model_path
    try:
        return default_model_path()
    except DefaultModelMissingError:
        pytest.skip("built-in model not installed (make test installs it)")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """(bundle folder, executable, seconds the build took)."""
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


def _engine_reads_env_var(model: Path, tmp: Path) -> bool:
    """Does engine.loading.default_model honour TANDEM_DEFAULT_MODEL yet? (docs/PACKAGING.md)"""
    from engine.loading.default_model import default_model_path
    probe = tmp / "probe" / model.name
    probe.parent.mkdir()
    probe.symlink_to(model)
    old = os.environ.get("TANDEM_DEFAULT_MODEL")
    os.environ["TANDEM_DEFAULT_MODEL"] = str(probe)
    try:
        return Path(default_model_path()) == probe
    finally:
        os.environ.pop("TANDEM_DEFAULT_MODEL")
        if old is not None:
            os.environ["TANDEM_DEFAULT_MODEL"] = old


def _clean_env(tmp: Path, model: Path) -> dict:
    """Nothing from this checkout or the user's folders: only the bundle and a temp home."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QT_", "XDG_", "TANDEM_"))}
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        env[name] = str(tmp / name.lower())
    env.update(QT_QPA_PLATFORM="offscreen", TANDEM_DATA_DIR=str(tmp / "data"),
               TANDEM_DEFAULT_MODEL=str(model))
    return env


def test_bundled_app_passes_its_self_test(bundle, tmp_path):
    _, exe = bundle
    model = _default_model()
    cmd = [str(exe), "--self-test"]
    if not _engine_reads_env_var(model, tmp_path):
        cmd += ["--model", str(model)]    # until engine/loading/default_model.py reads the env var
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
                         env=_clean_env(tmp_path, model))
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    detail = f"exit {out.returncode}\nstdout:\n{out.stdout[-2000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, detail
    assert lines and re.match(r"self-test ok: .*max batch [2-9]", lines[-1]), detail


def test_bundled_app_finds_the_model_in_the_shared_models_folder(bundle, tmp_path):
    """What a double-clicked app does: no flags, no env var; the model was linked into
    <user data dir of "Tandem">/models by `make model` (engine.loading.default_model.share_default_model)."""
    import engine.loading.default_model as dm
    if not hasattr(dm, "models_dir"):
        pytest.skip("engine/loading/default_model.py has no shared models folder yet (docs/PACKAGING.md)")
    _, exe = bundle
    model = _default_model()
    env = _clean_env(tmp_path, model)
    del env["TANDEM_DEFAULT_MODEL"]
    env["HOME"] = str(tmp_path / "home")
    code = "import engine.loading.default_model as m; print(m.models_dir())"
    where = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(ROOT),
                           check=False, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    models = Path(where.stdout.strip())
    assert tmp_path in models.parents          # never the real user's folder
    models.mkdir(parents=True)
    (models / model.name).symlink_to(model)
    out = subprocess.run([str(exe), "--self-test"], check=False, capture_output=True, text=True, timeout=600,
                         cwd=str(tmp_path), env=env)
    detail = f"exit {out.returncode}\nstdout:\n{out.stdout[-2000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0 and "self-test ok" in out.stdout, detail


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
