"""Find local models: the Hugging Face cache and LM Studio's folders (no Qt).

A model is an MLX/HF folder (config.json with *.safetensors) or a .gguf file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FoundModel:
    name: str
    path: str
    source: str          # "Hugging Face cache" | "LM Studio" | "Recent"


def hf_cache_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return _unique(dirs)


def lmstudio_dirs() -> list[Path]:
    return _unique([Path.home() / ".lmstudio" / "models",
                    Path.home() / ".cache" / "lm-studio" / "models"])


def find_models() -> list[FoundModel]:
    found = [m for d in hf_cache_dirs() for m in _scan_hf_cache(d)]
    found += [m for d in lmstudio_dirs() for m in _scan_tree(d, "LM Studio", depth=3)]
    return found


def is_model_path(path: Path) -> bool:
    if path.is_file():
        return path.suffix.lower() == ".gguf"
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def _scan_hf_cache(root: Path) -> list[FoundModel]:
    """hub/models--org--name/snapshots/<rev>/ : take each repo's newest snapshot."""
    out = []
    for repo in sorted(root.glob("models--*")) if root.is_dir() else []:
        snapshots = sorted((repo / "snapshots").glob("*"), key=_mtime, reverse=True)
        name = repo.name[len("models--"):].replace("--", "/")
        for snap in snapshots[:1]:
            if is_model_path(snap):
                out.append(FoundModel(name, str(snap), "Hugging Face cache"))
            out += [FoundModel(f"{name}/{g.name}", str(g), "Hugging Face cache")
                    for g in sorted(snap.glob("*.gguf"))]
    return out


def _scan_tree(root: Path, source: str, depth: int) -> list[FoundModel]:
    if depth < 0 or not root.is_dir():
        return []
    if is_model_path(root):
        return [FoundModel(root.name, str(root), source)]
    out = []
    for child in sorted(root.iterdir()):
        if child.is_file() and child.suffix.lower() == ".gguf":
            out.append(FoundModel(child.name, str(child), source))
        elif child.is_dir():
            out += _scan_tree(child, source, depth - 1)
    return out


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _unique(paths: list[Path]) -> list[Path]:
    seen, out = set(), []
    for p in paths:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out
