"""Where Tandem keeps its database: arg > $TANDEM_DATA_DIR > platformdirs."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_VAR = "TANDEM_DATA_DIR"


def data_dir(override: str | os.PathLike | None = None) -> Path:
    chosen = override or os.environ.get(ENV_VAR) or platformdirs.user_data_dir("Tandem")
    path = Path(chosen).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path
