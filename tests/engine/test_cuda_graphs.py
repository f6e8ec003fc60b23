"""The engine runs at MLX's own CUDA graph limits (engine/cuda_graphs.py says why), and
the benches print what their process runs under."""
import os
import subprocess
import sys

from engine import cuda_graphs


def test_importing_the_engine_leaves_the_graph_limit_as_the_user_set_it():
    env = {k: v for k, v in os.environ.items() if k != cuda_graphs.ENV_VAR}
    code = "import os, engine; print(os.environ.get('MLX_MAX_MB_PER_BUFFER'))"
    for value in (None, "250"):
        run_env = env if value is None else {**env, cuda_graphs.ENV_VAR: value}
        out = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == str(value)


def test_the_setting_is_reported_set_or_not(monkeypatch):
    monkeypatch.delenv(cuda_graphs.ENV_VAR, raising=False)
    assert cuda_graphs.graph_limit_setting() == "MLX_MAX_MB_PER_BUFFER unset (MLX default)"
    monkeypatch.setenv(cuda_graphs.ENV_VAR, "250")
    assert cuda_graphs.graph_limit_setting() == "MLX_MAX_MB_PER_BUFFER 250"
