"""Checks a model path before anything is unloaded for it (no mlx): the path exists,
a file is a .gguf whose header and tensor table are sound (gguf_check.py), a folder
has config.json and .safetensors files. The app runs it first, so a bad choice is
refused while the current model keeps running; loader.py then checks everything
(weights, architecture) as it loads."""
from __future__ import annotations

from pathlib import Path

from engine.errors import ModelLoadError
from engine.loading.gguf_check import check_gguf


def check_path_kind(path: Path) -> bool:
    """True for a .gguf file, False for a folder; ModelLoadError saying what to do for a
    missing path or another kind of file (the loader asks this too)."""
    if not path.exists():
        raise ModelLoadError(f"{path} does not exist; choose a model folder or a .gguf file.")
    if path.is_file() and path.suffix != ".gguf":
        raise ModelLoadError(f"{path.name} is not a .gguf file; choose a .gguf file or "
                             "a folder with config.json and .safetensors files.")
    return path.is_file()


def check_model_path(path: str | Path) -> None:
    """Raise ModelLoadError saying what to do if `path` cannot be a model to load."""
    path = Path(path).expanduser()
    if check_path_kind(path):
        check_gguf(path)
        return
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} has no config.json: choose a model folder "
                             "(MLX or Hugging Face safetensors) or a .gguf file.")
    if not any(path.glob("*.safetensors")):
        raise ModelLoadError(f"{path} has no .safetensors files; re-download the model.")
