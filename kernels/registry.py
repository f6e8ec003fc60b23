"""Which backend each custom kernel runs on, and the switch to turn one off.

Every kernel module asks `active(name)` before it launches: the answer is
"cuda", "metal" or None (use the plain-mx reference). A kernel is off when
no GPU backend is present, when the default device is the CPU, or when
`disable()` was called (the self-test does that for any kernel that fails
against its reference, so a broken Metal source degrades to slow-but-right
instead of wrong tokens).
"""
from __future__ import annotations

import mlx.core as mx

NAMES = ("gated_delta_step", "gated_delta_chunk", "paged_attention", "moe_route")

_disabled: dict[str, str] = {}


def gpu_backend() -> str | None:
    """'cuda' or 'metal' when MLX has that backend and the default device is the GPU."""
    if mx.default_device().type != mx.DeviceType.gpu:
        return None
    if mx.cuda.is_available():
        return "cuda"
    if mx.metal.is_available():
        return "metal"
    return None


def absent_reason() -> str:
    """Why no kernel can run here (for skip messages and the status dict)."""
    if not (mx.cuda.is_available() or mx.metal.is_available()):
        return "no GPU backend in this MLX build"
    return "default device is the CPU"


def active(name: str) -> str | None:
    """The backend `name` should launch on now, or None for the reference."""
    if name in _disabled:
        return None
    return gpu_backend()


def disable(name: str, reason: str) -> None:
    """Route `name` to its reference from now on; `reason` shows in `enabled()`."""
    if name not in NAMES:
        raise KeyError(f"unknown kernel {name!r}; known: {', '.join(NAMES)}")
    _disabled[name] = reason


def enable(name: str) -> None:
    """Undo `disable` (the self-test re-enables before it re-checks)."""
    _disabled.pop(name, None)


def enabled() -> dict[str, str]:
    """name -> 'cuda' | 'metal' | 'reference (<reason>)', for the status panel."""
    backend = gpu_backend()
    status = {}
    for name in NAMES:
        if name in _disabled:
            status[name] = f"reference ({_disabled[name]})"
        elif backend is None:
            status[name] = f"reference ({absent_reason()})"
        else:
            status[name] = backend
    return status
