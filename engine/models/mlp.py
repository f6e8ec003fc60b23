"""The SwiGLU MLP: a dense decoder layer's (Llama, Qwen3.5's dense layers) and a MoE
block's shared expert."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from engine.models.elementwise import swiglu
from engine.models.fused import fuse_linears


class MLP(nn.Module):
    def __init__(self, dims: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dims, hidden, bias=False)
        self.up_proj = nn.Linear(dims, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dims, bias=False)

    def fuse_projections(self) -> None:
        """After loading: gate and up become one matmul (engine/models/fused.py)."""
        fuse_linears(self, ("gate_proj", "up_proj"), "gate_up_proj")

    def __call__(self, x: mx.array) -> mx.array:
        if "gate_up_proj" not in self:
            return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))
        joined = self.gate_up_proj
        out = joined.joined_output(x)
        # one node where kernels/swiglu_joined launches, not a Split and the compiled swiglu
        y = joined.kernel_set.swiglu_joined(out, joined.parts.starts[1], joined.parts.sizes[0])
        return self.down_proj(swiglu(*joined.split(out)) if y is None else y)
