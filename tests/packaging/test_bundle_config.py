"""What the recipe puts in the bundle (no build): Info.plist, plugin choice, modules, icons."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packaging"))
import bundle_config as cfg

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_info_plist_comes_from_the_project():
    import tomllib
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert cfg.project_version() == version
    plist = cfg.info_plist(version)
    assert plist["CFBundleIdentifier"] == "dev.tandem.Tandem"
    assert plist["CFBundleShortVersionString"] == plist["CFBundleVersion"] == version
    assert plist["LSMinimumSystemVersion"] == "13.5"
    assert plist["NSHighResolutionCapable"] is True


def test_only_the_qt_plugins_the_app_uses():
    qt = "PySide6/Qt/plugins"
    linux = {f"{qt}/platforms/libqxcb.so": True, f"{qt}/platforms/libqoffscreen.so": True,
             f"{qt}/platforms/libqminimal.so": True, f"{qt}/platforms/libqwayland.so": False,
             f"{qt}/platforms/libqeglfs.so": False, f"{qt}/platformthemes/libqgtk3.so": False,
             f"{qt}/imageformats/libqpdf.so": False, f"{qt}/sqldrivers/libqsqlite.so": False,
             "PySide6/Qt/lib/libQt6Pdf.so.6": False, "PySide6/Qt/lib/libQt6Gui.so.6": True,
             "PySide6/Qt/translations/qtbase_de.qm": False, "mlx/lib/libmlx.so": True}
    for dest, kept in linux.items():
        assert cfg.keep_file(dest, "linux") is kept, dest
    mac = {f"{qt}/platforms/libqcocoa.dylib": True, f"{qt}/styles/libqmacstyle.dylib": True,
           f"{qt}/imageformats/libqjpeg.dylib": False, "mlx/lib/mlx.metallib": True}
    for dest, kept in mac.items():
        assert cfg.keep_file(dest, "darwin") is kept, dest


def test_every_engine_module_is_bundled_but_not_the_benchmarks():
    modules = cfg.our_modules()
    # engine.loading.loader and kernels.selftest import these by name, invisibly to PyInstaller.
    for name in ("app", "engine.models.llama", "engine.models.qwen3_5", "kernels.moe_route",
                 "kernels.paged_attention", "engine.telemetry.ioreport"):
        assert name in modules
    assert not [m for m in modules if cfg.in_bench_package(m)]
    bench = cfg.our_modules(benchmarks=True)
    assert {"engine.bench", "engine.bench.suite", "engine.bench.profile_ops", "kernels.bench",
            "kernels.bench.moe_route"} <= set(bench)
    assert all(m.startswith(("engine.bench", "kernels.bench")) for m in bench)


def test_benchmarks_are_left_out_by_package_not_by_name():
    assert cfg.in_bench_package("engine.bench") and cfg.in_bench_package("kernels.bench.common")
    # A product module whose name merely starts with "bench" stays in.
    assert not cfg.in_bench_package("engine.benchmark_free")
    assert not cfg.in_bench_package("engine.telemetry.bench_like")


def test_style_sheets_and_icons_travel_with_the_app():
    datas = cfg.resource_datas()
    assert (str(ROOT / "resources" / "tandem.qss"), "resources") in datas
    for theme in ("light", "dark"):            # app/style.py reads the sheet's colours there
        assert (str(ROOT / "resources" / "themes" / f"{theme}.json"), "resources/themes") in datas
    assert ("resources/icons", ) == tuple({d for _, d in datas if "icons" in d})


def test_icons_are_valid():
    png = cfg.ICON_PNG.read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert struct.unpack(">II", png[16:24]) == (1024, 1024)
    icns = cfg.ICON_ICNS.read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)
    kinds, pos = {}, 8
    while pos < len(icns):
        kind, size = icns[pos:pos + 4], struct.unpack(">I", icns[pos + 4:pos + 8])[0]
        kinds[kind] = icns[pos + 8:pos + size]
        pos += size
    assert pos == len(icns)
    assert {b"ic07", b"ic08", b"ic09", b"ic10", b"ic11", b"ic12", b"ic13", b"ic14"} <= set(kinds)
    assert all(data.startswith(PNG_MAGIC) for data in kinds.values())
    ico = cfg.ICON_ICO.read_bytes()
    assert struct.unpack("<HHH", ico[:6])[:2] == (0, 1)


def test_the_built_in_model_is_bundled_where_the_app_looks_first():
    """The package's GGUF, located without importing the package, goes to the folder
    that engine/loading/default_model.py searches first when frozen."""
    import importlib.util

    import pytest

    import engine.loading.default_model as dm
    assert (cfg.MODEL_PACKAGE, cfg.MODEL_DIR) == (dm.PACKAGE, dm.BUNDLE_DIR)
    if importlib.util.find_spec(cfg.MODEL_PACKAGE) is None:
        assert cfg.model_datas() == []
        pytest.skip("built-in model not installed (make test installs it)")
    was_imported = cfg.MODEL_PACKAGE in sys.modules
    [(source, folder)] = cfg.model_datas()
    assert folder == "models" and source.endswith(".gguf") and Path(source).is_file()
    assert (cfg.MODEL_PACKAGE in sys.modules) == was_imported      # found, not imported
