"""Where custom kernels can launch in this process: the GPU backend, or why none.

Pure questions about MLX and the default device; no state. Which kernels a loaded
model actually launches is its own `KernelSet` (kernels/kernel_set.py).
"""
from __future__ import annotations

import mlx.core as mx

NAMES = ("gated_delta_step", "gated_delta_chunk", "paged_attention", "moe_route",
         "moe_experts", "moe_block", "gdn_conv_step", "add_rms_norm", "gated_rms_norm",
         "attention_prep", "top_p_cut", "gated_delta_step_norm", "qmm_rows", "moe_grouped",
         "gdn_conv_chunk", "swiglu_joined", "qmv_normed", "cdf_draw", "add_norm_qmv")
# Kernels with a CUDA source only, and why: on Metal the model keeps MLX's own op.
CUDA_ONLY = {"qmm_rows": "CUDA only: MLX's Metal quantized matmul serves small batches "
                         "(not measured against it on a Mac)",
             "moe_grouped": "CUDA only: MLX's Metal gather_qmm reads each expert once for "
                            "sorted pairs already",
             "qmv_normed": "CUDA only: on Metal MLX's rms_norm and qmv run (not measured "
                           "against them on a Mac)",
             "add_norm_qmv": "CUDA only: on Metal add_rms_norm and MLX's qmv run (not "
                             "measured against them on a Mac)"}


# Kernels that pass their checks but stay off at load, and why: not yet timed on a GPU
# against the path they replace, or timed slower there. TANDEM_KERNELS_ON=name turns one
# on (the benchmark that times it; kernels/selftest.py).
OFF_AT_LOAD: dict[str, str] = {
    "qmv_normed": "slower than MLX's rms_norm and qmv where timed (H100, session 32: 33.5 "
                  "against ~22 us a projection, a B=1 step 4.6 against 4.3 ms; session 39: "
                  "no gain above the spread between processes); "
                  "TANDEM_KERNELS_ON=qmv_normed turns it on",
    "add_norm_qmv": "not yet timed on a GPU against add_rms_norm and MLX's qmv (written in "
                    "session 50, checked on the CPU only); TANDEM_KERNELS_ON=add_norm_qmv "
                    "turns it on",
}


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
