"""Where the Hugging Face hub cache lives (plain paths; no huggingface_hub needed).

Used by the built-in model's search (default_model.py) and the app's model list
(app/controllers/model_discovery.py), so both look in the same places, in order:
``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``.
"""
from __future__ import annotations

import os
from pathlib import Path


def hf_cache_dirs() -> list[Path]:
    """The candidate hub folders, first match first, without duplicates (may not exist)."""
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]).expanduser())
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def repo_name(repo_dir: Path) -> str:
    """``models--org--name`` -> ``org/name``."""
    return repo_dir.name[len("models--"):].replace("--", "/")


def snapshots_newest_first(repo_dir: Path) -> list[Path]:
    """A cached repo's ``snapshots/<revision>`` folders, the most recently written first."""
    return sorted((repo_dir / "snapshots").glob("*"), key=_mtime, reverse=True)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
