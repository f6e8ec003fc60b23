"""The engine's plain-Python parts import without mlx (the app's fake engine, the
scheduler's tests and the app's status views rely on it)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Any import of mlx (or mlx.core, ...) fails, as on a machine without it.
BLOCK_MLX = textwrap.dedent("""
    import sys
    from importlib.abc import MetaPathFinder

    class BlockMlx(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "mlx" or name.startswith("mlx."):
                raise ImportError(f"mlx is blocked in this test: {name}")
            return None

    sys.meta_path.insert(0, BlockMlx())
    for name in [n for n in sys.modules if n == "mlx" or n.startswith("mlx.")]:
        del sys.modules[name]
""")

PLAIN_MODULES = [
    "engine", "engine.events", "engine.sampling_params", "engine.errors", "engine.config",
    "engine.handle", "engine.arith", "engine.core.sequence", "engine.core.scheduler",
    "engine.cache.page_pool", "engine.cache.prefix_cache", "engine.cache.cache_manager",
    "engine.cache.kv_budget", "engine.telemetry", "engine.telemetry.trace",
    "engine.telemetry.trace_format", "engine.telemetry.trace_check",
    "engine.telemetry.monitor", "engine.telemetry.cpu", "engine.distributed.hosts_file",
]


def run_blocked(body: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run([sys.executable, "-c", BLOCK_MLX + textwrap.dedent(body)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_the_block_works():
    done = run_blocked("import mlx.core")
    assert done.returncode != 0 and "mlx is blocked" in done.stderr


def test_plain_modules_import_without_mlx():
    done = run_blocked(f"""
        import importlib
        for name in {PLAIN_MODULES!r}:
            importlib.import_module(name)
        assert not [n for n in sys.modules if n == "mlx" or n.startswith("mlx.")]
        print("ok")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_package_face_is_lazy_and_complete():
    done = run_blocked("""
        import engine
        from engine import EngineConfig, SamplingParams, TandemError, PromptTooLongError
        from engine import ModelLoadError, RequestHandle, Completion
        assert EngineConfig().kv_budget_mb is None and SamplingParams().max_tokens > 0
        assert issubclass(PromptTooLongError, TandemError)
        try:
            engine.Engine                     # the one name that needs mlx
        except ImportError as e:
            print("blocked:", e)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("blocked: mlx is blocked")


def test_the_scheduler_plans_without_mlx():
    done = run_blocked("""
        from engine.cache.cache_manager import CacheManager
        from engine.config import EngineConfig
        from engine.core.scheduler import Scheduler
        from engine.core.sequence import Sequence
        cfg = EngineConfig(num_pages=16, page_size=4, prefill_chunk=8)
        sched = Scheduler(cfg, CacheManager(16, 4, 4, keep_turns=2, exact_prefix_only=False))
        sched.add(Sequence(1, list(range(6))))
        plan = sched.schedule()
        assert [c.num_tokens for c in plan.prefills] == [6]
        sched.cache.check_invariants()
        print("ok")
    """)
    assert done.returncode == 0, done.stderr


def test_the_app_imports_engine_modules_without_loading_mlx():
    pytest.importorskip("PySide6", reason="the app's half (the GPU machine has no Qt)")
    # The app's modules import engine at their top; only loading a model may load mlx.
    done = run_blocked("""
        import app.controllers.bridge, app.controllers.chat_session
        import app.status.trace_controller
        print("ok")
    """)
    assert done.returncode == 0, done.stderr
