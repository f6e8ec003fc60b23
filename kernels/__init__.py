"""Tandem's custom kernels: one module per operation, each with a plain-mx
float32 reference, CUDA and Metal sources, and a dispatcher that falls back
to the reference where no kernel applies or the self-test turned it off.

Models call these; `enabled()` tells the status panel what runs where.
"""
from kernels.gated_delta_chunk import gated_delta_chunk
from kernels.gated_delta_step import gated_delta_step
from kernels.moe_route import moe_route
from kernels.paged_attention import paged_decode_attention
from kernels.registry import disable, enable, enabled


def run_selftest(verbose: bool = False) -> dict:
    """Check every kernel against its reference here; disable failures. See kernels.selftest."""
    from kernels.selftest import run_selftest as _run
    return _run(verbose=verbose)


__all__ = ["gated_delta_step", "gated_delta_chunk", "paged_decode_attention", "moe_route",
           "enabled", "disable", "enable", "run_selftest"]
