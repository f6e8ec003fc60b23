"""Issue 22 item 9: a model that fails its check (a damaged .gguf, a folder without
weights) is refused before anything is unloaded: the current model keeps running,
a reply in flight goes on, and nothing is reloaded."""
from __future__ import annotations

import struct

import pytest

from app.storage.message import MessageState


def _reply(session):
    return session.model.message(session.model.last_row())


def _damaged_gguf(folder):
    path = folder / "damaged.gguf"
    # A sound start, then a tensor count no 40-byte file can hold.
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 2) + b"\0" * 16)
    return path


@pytest.mark.parametrize("kind", ["gguf", "folder", "missing"])
def test_an_invalid_model_is_refused_and_the_current_one_kept(make_window, wait_until, run,
                                                             tmp_path, kind):
    loads = []

    def wrap(loader):
        def load(model=None, config=None, on_progress=None):
            loads.append(model)
            return loader(model=model, config=config, on_progress=on_progress)
        return load
    window = make_window(max_tokens=200, wrap_loader=wrap)
    engine, name = window.bridge.engine, window.bridge.model_name
    session = window.panes.panes()[0].session
    session.send("a long answer, please")
    wait_until(lambda: (_reply(session).num_tokens or 0) >= 1)
    if kind == "gguf":
        bad = _damaged_gguf(tmp_path)
    elif kind == "folder":
        bad = tmp_path / "empty-model"
        bad.mkdir()
        (bad / "config.json").write_text("{}")
    else:
        bad = tmp_path / "gone.gguf"
    unloaded = []
    window.bridge.model_unloaded.connect(lambda: unloaded.append(True))
    assert not run(window.load_model(str(bad)))
    assert window.bridge.engine is engine and window.bridge.model_name == name
    assert loads == [loads[0]] and not unloaded             # no unload, no reload
    assert window.error_box is not None and window.error_box.isVisible()
    assert bad.name in window.last_error
    assert window.model_label.text() == f"Model: {name}" and not window.progress.isVisible()
    assert session.busy                                      # the reply goes on
    wait_until(lambda: not session.busy)
    assert _reply(session).state in (MessageState.DONE, MessageState.LENGTH)
    assert str(bad) not in window.store.get_setting("recent_models", [])
