"""Find local models: the Hugging Face cache and LM Studio's folders (no Qt).

A model is an MLX/HF folder (config.json with *.safetensors) or a .gguf file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.loading.hf_cache import hf_cache_dirs, repo_name, snapshots_newest_first


@dataclass(frozen=True)
class FoundModel:
    name: str
    path: str
    source: str          # "Built-in" | "Recent" | "Hugging Face cache" | "LM Studio"


def lmstudio_dirs() -> list[Path]:
    return _unique([Path.home() / ".lmstudio" / "models",
                    Path.home() / ".cache" / "lm-studio" / "models"])


def builtin_model() -> FoundModel | None:
    """The model Tandem ships with (engine/loading/default_model.py), if it is here."""
    from engine.errors import DefaultModelMissingError
    from engine.loading.default_model import default_model_path
    try:
        path = default_model_path()
    except DefaultModelMissingError:
        return None
    return FoundModel(f"{path.stem if path.is_file() else path.name} (built-in)", str(path),
                      "Built-in")


def models_folders() -> list[Path]:
    """Where model files live here, most likely first: where an open-file dialog starts."""
    from engine.loading.default_model import models_dir
    builtin = builtin_model()
    found = [*hf_cache_dirs(), *lmstudio_dirs(), models_dir()]
    if builtin is not None:
        found.append(Path(builtin.path).parent)
    return [p for p in _unique(found) if p.is_dir()]


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
        name = repo_name(repo)
        for snap in snapshots_newest_first(repo)[:1]:
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


def _unique(paths: list[Path]) -> list[Path]:
    seen, out = set(), []
    for p in paths:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out
