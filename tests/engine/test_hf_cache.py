"""One place knows where the Hugging Face cache is: the built-in model's search and
the app's model list both use engine/loading/hf_cache.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.loading import default_model
from engine.loading.hf_cache import hf_cache_dirs, repo_name


def test_order_env_first_no_duplicates(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path))               # $HF_HOME/hub: the same folder
    assert hf_cache_dirs() == [tmp_path / "hub", Path.home() / ".cache/huggingface/hub"]
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HF_HOME")
    assert hf_cache_dirs() == [Path.home() / ".cache/huggingface/hub"]
    assert repo_name(Path("models--HuggingFaceTB--SmolLM2-135M")) == "HuggingFaceTB/SmolLM2-135M"


def test_default_model_found_in_the_same_cache_the_app_lists(tmp_path, monkeypatch):
    pytest.importorskip("PySide6", reason="the app's half (the GPU machine has no Qt)")
    from app.controllers.model_discovery import find_models
    snap = tmp_path / "hub" / "models--org--SmolLM2-135M-Instruct-GGUF" / "snapshots" / "r1"
    snap.mkdir(parents=True)
    (snap / "smollm2.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert default_model._from_hf_cache() == snap / "smollm2.gguf"
    assert str(snap / "smollm2.gguf") in {m.path for m in find_models()}
