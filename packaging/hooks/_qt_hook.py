"""Shared body of our PySide6 hooks: PyInstaller's Qt collection, minus the plugins,
translations and libraries Tandem does not use (bundle_config.keep_file decides).

Filtering here, before PyInstaller analyses binary dependencies, also keeps out what
only the dropped plugins link against (GTK, cairo, Wayland, EGL, ...)."""
from pathlib import Path

import bundle_config  # on sys.path: tandem.spec put packaging/ there
from PyInstaller.utils.hooks.qt import add_qt6_dependencies


def qt6_dependencies(hook_file: str):
    hiddenimports, binaries, datas = add_qt6_dependencies(hook_file)
    def keep(entry):
        return bundle_config.keep_file(str(Path(entry[1]) / Path(entry[0]).name))
    return hiddenimports, [b for b in binaries if keep(b)], [d for d in datas if keep(d)]
