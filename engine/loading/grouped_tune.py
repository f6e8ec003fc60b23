"""At load on CUDA: from how many pairs a prompt chunk's experts run grouped by expert.

kernels/moe_grouped_tune.py measures the grouped kernel against the model's own path on
the model's first quantized MoE layer; the answer goes into the model's kernel set
(`KernelSet.grouped_from`), so two engines in a process never share it. Nothing is
measured where the kernel cannot launch (no CUDA, the self-test turned it off, no MoE
layer it fits) or where a bench forced the threshold (`--moe-grouped-from`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import kernels.moe_grouped as mg
from engine.models.moe import SparseMoeBlock
from kernels.kernel_set import KernelSet
from kernels.moe_grouped_tune import describe, routed_inputs, tune

log = logging.getLogger(__name__)


def first_moe_block(model) -> SparseMoeBlock | None:
    return next((m for _, m in model.named_modules() if isinstance(m, SparseMoeBlock)
                 and m.switch_mlp.quantized_experts() is not None), None)


def tune_grouped(model, kernels: KernelSet,
                 announce: Callable[[], None] = lambda: None) -> tuple[KernelSet, str]:
    """(the kernel set with `grouped_from` measured, what was found), or the set as it is
    and '' where nothing is measured. `announce` runs just before measuring."""
    if kernels.launches(mg.NAME) != "cuda" or mg.MIN_PAIRS is not None:
        return kernels, ""
    block = first_moe_block(model)
    if block is None:
        return kernels, ""
    experts = block.switch_mlp.quantized_experts()
    num_experts = experts.gate_up[0].shape[0]
    dims = experts.gate_up[0].shape[2] * 32 // experts.bits       # uint32 words a row
    dtype = experts.gate_up[1].dtype                  # the scales': the activations' dtype
    announce()

    def grouped(x, idx, scores):
        return mg.kernel(x, idx, scores, experts, backend="cuda")

    try:
        least, times = tune(
            block.gathered_experts, grouped,
            lambda x, idx, scores: mg.applies(x, idx, experts, min_pairs=1),
            lambda n: routed_inputs(n, block.top_k, num_experts, dims, dtype), block.top_k)
    except (RuntimeError, ValueError) as e:   # the self-test passed it; a load never fails here
        log.warning("moe_grouped not measured: %s", e)
        return kernels, f"moe_grouped off (its measure raised: {e})"
    line = describe(least, times, block.top_k)
    log.info("%s", line)
    return replace(kernels, grouped_from=least), line
