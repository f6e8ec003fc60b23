"""App tests: offscreen Qt, a temp data dir, a qasync loop, and an engine:
the real one on a tiny random model when engine/ provides it, else the fake."""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def _real_engine_available() -> bool:
    try:
        import engine  # noqa: F401
        from engine import Engine  # noqa: F401
        sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
        import tiny_models  # noqa: F401
        return True
    except ImportError:
        return False


REAL_ENGINE = _real_engine_available() and not os.environ.get("TANDEM_FAKE_ENGINE")


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    monkeypatch.setenv("TANDEM_DATA_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def model_path(tmp_path_factory):
    """A model path the loader accepts (tiny random Llama, or a folder for the fake)."""
    folder = tmp_path_factory.mktemp("tiny-model")
    if REAL_ENGINE:
        import tiny_models
        return str(tiny_models.write_tiny_llama(folder))
    return str(folder)


@pytest.fixture(scope="session")
def endless_model_path(tmp_path_factory, model_path):
    """The tiny random Llama with its end-of-text row zeroed: greedy decoding never picks
    it (some other logit is above 0), so a reply lasts until max_tokens, however fast
    the machine: tests that act while a reply streams cannot find it finished."""
    if not REAL_ENGINE:
        return model_path
    import mlx.core as mx
    import tiny_models
    folder = tiny_models.write_tiny_llama(tmp_path_factory.mktemp("endless"))
    weights = mx.load(str(folder / "model.safetensors"))
    embed = weights["model.embed_tokens.weight"]
    weights["model.embed_tokens.weight"] = mx.concatenate([mx.zeros_like(embed[:1]), embed[1:]])
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return str(folder)


@pytest.fixture(scope="session")
def loader():
    if REAL_ENGINE:
        from app.controllers.bridge import default_loader
        return default_loader
    from fake_engine import FakeEngine
    return FakeEngine.load


@pytest.fixture
def qloop(qapp):
    import qasync
    loop = qasync.QEventLoop(qapp, already_running=False)
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)


@pytest.fixture
def run(qloop):
    """run(coro) drives the Qt + asyncio loop until `coro` is done."""
    return qloop.run_until_complete


@pytest.fixture
def wait_until(run):
    def wait(predicate, timeout=60.0):
        async def poll():
            deadline = time.monotonic() + timeout
            while not predicate():
                assert time.monotonic() < deadline, "condition not reached in time"
                await asyncio.sleep(0.02)
        run(poll())
    return wait


@pytest.fixture
def make_window(qapp, data_dir, loader, model_path, run):
    """make_window() -> a shown MainWindow on the data dir with the model loaded.
    telemetry: a TelemetryMonitor for the status panel and the trace;
    wrap_loader(loader) -> loader: to watch or alter model loads."""
    from app.controllers.bridge import EngineBridge
    from app.storage.app_settings import AppSettings
    from app.storage.store import Store
    from app.windows.main_window import MainWindow
    made = []

    def make(load=True, max_tokens=24, telemetry=None, wrap_loader=None, model=None):
        """model: a path to load instead of model_path (e.g. endless_model_path)."""
        store = Store(data_dir)
        store.set_setting("settings", AppSettings().with_chat(max_tokens=max_tokens,
                                                              temperature=0.0).to_dict())
        bridge = EngineBridge(wrap_loader(loader) if wrap_loader else loader,
                              **({} if REAL_ENGINE else {"check": None}))
        window = MainWindow(store, bridge, telemetry=telemetry)
        made.append((window, bridge, store))
        window.show()
        if load:
            assert run(window.load_model(model or model_path)), window.last_error
        return window

    yield make
    for window, bridge, store in made:
        window.close()
        bridge.close()
        store.close()
