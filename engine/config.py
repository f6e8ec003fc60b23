"""Engine limits, fixed when a model is loaded."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 16          # sequences decoded together in one forward
    page_size: int = 16             # tokens per KV page
    num_pages: int = 4096           # KV budget: pages in the pool (page 0 is scratch)
    prefill_chunk: int = 512        # prompt tokens read per step (several prompts may share it)
    # While others stream, a step's prompt reading may slow their decode by this fraction.
    max_decode_slowdown: float = 0.25
    max_context: int = 8192         # prompt + generation, per sequence
    use_kernels: bool = True        # custom kernels where the self-test passed
    # Finished turns kept (pages and recurrent state) for each conversation's next turn.
    prefix_cache: bool = True
    num_cached_turns: int = 8       # extra state slots they may hold
    # On MLX's CPU backend: "dense" dequantizes to float32 at load (BLAS matmuls, many
    # times faster), "quantized" keeps 4/8-bit weights (less memory), "auto" goes dense
    # when the dense model takes at most a quarter of RAM (engine/loading/cpu_dense.py).
    cpu_weights: str = "auto"

    def __post_init__(self):
        for name in ("max_num_seqs", "page_size", "num_pages", "prefill_chunk", "max_context"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be >= 1")
        if self.max_decode_slowdown <= 0:
            raise ValueError("EngineConfig.max_decode_slowdown must be > 0")
        if self.cpu_weights not in ("auto", "dense", "quantized"):
            raise ValueError("EngineConfig.cpu_weights must be 'auto', 'dense' or 'quantized'")
        if self.num_pages < 2:
            raise ValueError("EngineConfig.num_pages must be >= 2 (page 0 is scratch)")

    @property
    def max_pages_per_seq(self) -> int:
        return -(-self.max_context // self.page_size)

    @property
    def num_state_slots(self) -> int:
        return self.max_num_seqs + (self.num_cached_turns if self.prefix_cache else 0)

    @property
    def num_usable_pages(self) -> int:
        return self.num_pages - 1
