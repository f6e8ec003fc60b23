"""MLX's CUDA graph-cache abort is off before mlx loads, unless the user chose otherwise."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VAR = "MLX_ENABLE_CACHE_THRASHING_CHECK"

# Records the variable at the moment mlx itself is first imported (the encoder that reads
# it is made later still, on the GPU's first use), then loads the engine as the app does.
SHOW = f"""
import os, sys
from importlib.abc import MetaPathFinder

seen = []

class Watch(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mlx" and not seen:
            seen.append(os.environ.get("{VAR}", "unset"))
        return None

sys.meta_path.insert(0, Watch())
import engine
from engine import Engine
print(seen[0] if seen else "mlx-never-imported")
"""


def _at_mlx_import(env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k != VAR}
    env.update(PYTHONPATH=str(ROOT), **env_extra)
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()[-1]


def test_the_abort_is_off_before_mlx_is_imported():
    assert _at_mlx_import({}) == "0"


def test_a_value_the_user_chose_is_kept():
    assert _at_mlx_import({VAR: "1"}) == "1"
