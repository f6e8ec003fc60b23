"""The CUDA graph byte limit is lifted on Linux before mlx reads it, never over a value
already set, and left alone elsewhere (engine/cuda_graphs.py)."""
import os
import subprocess
import sys

from engine import cuda_graphs


def test_on_linux_an_unset_limit_is_lifted(monkeypatch):
    monkeypatch.delenv(cuda_graphs.ENV_VAR, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    cuda_graphs.lift_cuda_graph_byte_limit()
    assert os.environ[cuda_graphs.ENV_VAR] == cuda_graphs.NO_BYTE_LIMIT_MB


def test_a_limit_already_set_is_kept(monkeypatch):
    monkeypatch.setenv(cuda_graphs.ENV_VAR, "250")
    monkeypatch.setattr(sys, "platform", "linux")
    cuda_graphs.lift_cuda_graph_byte_limit()
    assert os.environ[cuda_graphs.ENV_VAR] == "250"


def test_on_macos_metal_keeps_its_own_limit(monkeypatch):
    monkeypatch.delenv(cuda_graphs.ENV_VAR, raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    cuda_graphs.lift_cuda_graph_byte_limit()
    assert cuda_graphs.ENV_VAR not in os.environ


def test_importing_the_engine_sets_it_before_mlx_is_loaded():
    env = {k: v for k, v in os.environ.items() if k != cuda_graphs.ENV_VAR}
    code = ("import sys, os; import engine; "
            "print('mlx.core' in sys.modules, os.environ.get('MLX_MAX_MB_PER_BUFFER'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    expected = cuda_graphs.NO_BYTE_LIMIT_MB if sys.platform.startswith("linux") else "None"
    assert out == ["False", expected]
