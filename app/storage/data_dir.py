"""Where Tandem keeps its database: arg > $TANDEM_DATA_DIR > platformdirs.

A bundled Tandem (PyInstaller sets sys.frozen) uses user_data_dir("Tandem"); a source
checkout uses user_data_dir("Tandem-dev"), so the two never open each other's database
by accident. Models are shared on purpose: engine.loading.default_model.models_dir().
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

ENV_VAR = "TANDEM_DATA_DIR"


def app_folder_name() -> str:
    return "Tandem" if getattr(sys, "frozen", False) else "Tandem-dev"


def prompt_cache_dir(data_folder: Path) -> Path:
    """Where the engine keeps conversations' prompt cache on disk: the user's cache
    folder (platformdirs.user_cache_dir), or inside a data folder given explicitly
    (tests, portable installs) so that one never writes into the other."""
    default = Path(platformdirs.user_data_dir(app_folder_name(), appauthor=False))
    if Path(data_folder).expanduser().resolve() != default.expanduser().resolve():
        return Path(data_folder) / "prompt-cache"
    return Path(platformdirs.user_cache_dir(app_folder_name(), appauthor=False)) / "prompt-cache"


def data_dir(override: str | os.PathLike | None = None) -> Path:
    chosen = (override or os.environ.get(ENV_VAR)
              or platformdirs.user_data_dir(app_folder_name(), appauthor=False))
    path = Path(chosen).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:       # read-only: store_opening runs in memory and says so
        pass
    return path
