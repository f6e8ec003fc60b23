"""MLX's CUDA kernel cache goes to the user's cache folder, set before mlx is imported."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOW = ("import os, sys; import engine; from engine import Engine; "
        "print(os.environ.get('MLX_PTX_CACHE_DIR')); print('mlx.core' in sys.modules)")


def _run(env_extra: dict, drop: tuple[str, ...] = ()) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONPATH=str(ROOT), **env_extra)
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MLX's CUDA backend is Linux-only")
def test_importing_the_engine_points_mlx_at_the_user_cache(tmp_path):
    folder, mlx_loaded = _run({"XDG_CACHE_HOME": str(tmp_path)}, drop=("MLX_PTX_CACHE_DIR",))
    assert Path(folder) == tmp_path / "Tandem" / "mlx-cuda-kernels"
    assert Path(folder).is_dir() and mlx_loaded == "True"


def test_a_folder_already_chosen_is_kept(tmp_path):
    chosen = str(tmp_path / "mine")
    folder, _ = _run({"MLX_PTX_CACHE_DIR": chosen, "XDG_CACHE_HOME": str(tmp_path)})
    assert folder == chosen
    assert not (tmp_path / "Tandem").exists()


def test_a_test_worker_gets_its_own_folder_seeded_from_the_shared_one(tmp_path, monkeypatch):
    from engine.kernel_cache import worker_kernel_cache
    shared = tmp_path / "kernels"
    shared.mkdir()
    (shared / "a.ptx").write_text("compiled")
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(shared))
    folder = worker_kernel_cache("gw3")
    assert folder == tmp_path / "kernels-gw3"
    assert (folder / "a.ptx").read_text() == "compiled"
    assert os.environ["MLX_PTX_CACHE_DIR"] == str(folder)
    (folder / "b.ptx").write_text("its own")          # a second start keeps what it compiled
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(shared))
    assert worker_kernel_cache("gw3") == folder and (folder / "b.ptx").exists()
    assert not (shared / "b.ptx").exists()
