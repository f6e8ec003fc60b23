"""What Help > About shows (no Qt): versions, the model, the engine's kernels, and
where Tandem keeps its data."""
from __future__ import annotations

import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from app.status.status_text import kernel_text
from app.status.trace_controller import traces_dir


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


@dataclass(frozen=True)
class AboutInfo:
    version: str
    model: str                      # "SmolLM2-135M-Instruct" or "none loaded"
    model_path: str
    kernels: str                    # one line, e.g. "kernels: reference (no GPU backend …)"
    kernel_details: str             # one line per kernel
    runtime: str                    # Python, Qt, MLX versions and the platform
    data_dir: Path
    models_dir: Path
    traces_dir: Path

    def as_text(self) -> str:
        """The whole dialog as plain text, for "Copy" (bug reports)."""
        return "\n".join([
            f"Tandem {self.version}", f"Model: {self.model} {self.model_path}".rstrip(),
            self.kernels, self.kernel_details, self.runtime,
            f"Data folder: {self.data_dir}", f"Models folder: {self.models_dir}",
            f"Traces folder: {self.traces_dir}"])


def about_info(bridge, data_dir: Path) -> AboutInfo:
    from PySide6 import __version__ as pyside_version

    from engine.loading.default_model import models_dir
    status = bridge.kernel_status
    kernels = kernel_text(status)
    return AboutInfo(
        version=package_version("tandem"),
        model=bridge.model_name or "none loaded",
        model_path=str(getattr(bridge.engine, "model_path", None) or bridge.model_path or ""),
        kernels=kernels.line if bridge.model_name else "kernels: no model loaded",
        kernel_details=kernels.tooltip if bridge.model_name and status else "",
        runtime=(f"Python {platform.python_version()} · PySide6 {pyside_version} · "
                 f"MLX {package_version('mlx')} · {platform.system()} {platform.machine()}"),
        data_dir=Path(data_dir), models_dir=models_dir(), traces_dir=traces_dir(data_dir))

