"""The synthetic model an op count measures, set up as the engine runs it on a path:
projections joined at load, and on the "gpu" path our kernels as counting stand-ins
(kernels/stand_in.py), on "device" the kernels this machine's self-test passes."""
from __future__ import annotations

from engine.models.base import fuse_projections, use_kernels
from kernels.kernel_set import KernelSet
from kernels.stand_in import COUNT


def counted_model(config: dict, path: str):
    from engine.bench.synthetic import synthetic_model_from_config
    model = synthetic_model_from_config(config)
    fuse_projections(model)               # as the engine runs it (engine/loading/model_bundle.py)
    if path == "gpu":
        use_kernels(model, KernelSet(COUNT))
    elif path == "device":
        from kernels import select_kernels
        use_kernels(model, select_kernels(True))
    return model
