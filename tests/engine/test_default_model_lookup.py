"""Where the built-in model is looked for: a frozen app's own bundle first."""
from __future__ import annotations

import sys

import pytest

import engine.loading.default_model as dm


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A package copy and a data folder copy, so the order is what decides."""
    monkeypatch.delenv(dm.ENV_VAR, raising=False)
    package = tmp_path / "package" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shared = tmp_path / "data" / "models" / "shared.gguf"
    for f in (package, shared):
        f.parent.mkdir(parents=True)
        f.write_bytes(b"GGUF")
    monkeypatch.setattr(dm, "_from_package", lambda: package)
    monkeypatch.setattr(dm, "models_dir", lambda: shared.parent)
    return package, shared


def _freeze(monkeypatch, root) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(root), raising=False)


def test_a_frozen_app_takes_the_model_inside_its_bundle(tmp_path, monkeypatch, elsewhere):
    bundled = tmp_path / "bundle" / dm.BUNDLE_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
    bundled.parent.mkdir(parents=True)
    bundled.write_bytes(b"GGUF")
    _freeze(monkeypatch, tmp_path / "bundle")
    assert dm.default_model_path() == bundled


def test_a_bundle_without_a_model_falls_back_in_order(tmp_path, monkeypatch, elsewhere):
    package, shared = elsewhere
    _freeze(monkeypatch, tmp_path / "empty bundle")
    assert dm.default_model_path() == package
    monkeypatch.setattr(dm, "_from_package", lambda: None)
    assert dm.default_model_path() == shared


def test_from_source_there_is_no_bundle(tmp_path, monkeypatch, elsewhere):
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)   # not frozen
    monkeypatch.delattr(sys, "frozen", raising=False)
    assert dm.bundle_root() is None
    assert dm.default_model_path() == elsewhere[0]
