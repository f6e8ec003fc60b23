"""At load on CUDA: which path a prompt chunk's experts take, measured on the model.

kernels/moe_grouped_tune.py measures the two kernels that can take a chunk's routed
experts against the model's own path on the model's first quantized MoE layer:
moe_experts (a warp a pair) up to how many pairs, then moe_grouped (each expert read
once) from how many, both at every chunk length, split where their total time is least
(`split`). The answers go into the model's kernel set (`KernelSet.experts_to`,
`KernelSet.grouped_from`), so two engines in a process never share them. Nothing is
measured where a kernel cannot launch (no CUDA, the self-test turned it off, no MoE layer
it fits) or where a bench forced the range (`--moe-max-pairs`, `--moe-grouped-from`).
A kernel whose result at the longest length measured is far from the plain path's (not
rounding: AGREE) is not extended, whatever its speed.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import mlx.core as mx

import kernels.moe_experts as me
import kernels.moe_grouped as mg
from engine.models.moe import SparseMoeBlock
from kernels.kernel_set import KernelSet
from kernels.moe_grouped_tune import (
    SIZES,
    crossing,
    describe,
    describe_reach,
    reach,
    routed_inputs,
    split,
    tune,
)

log = logging.getLogger(__name__)

# Largest |kernel - plain| / max |plain| accepted at load: a sanity bound against a kernel
# gone wrong past the lengths its tests cover (an index overflow gives O(1)), not a
# precision check (bf16 outputs: ~2**-8 apart; kernels/ tests bound the rounding).
AGREE = 0.05


def first_moe_block(model) -> SparseMoeBlock | None:
    return next((m for _, m in model.named_modules() if isinstance(m, SparseMoeBlock)
                 and m.switch_mlp.quantized_experts() is not None), None)


def tune_experts_paths(model, kernels: KernelSet,
                       announce: Callable[[], None] = lambda: None) -> tuple[KernelSet, str]:
    """(the kernel set with `experts_to` and `grouped_from` measured, one line each of
    what was found), or the set as it is and '' where nothing is measured. `announce`
    runs just before measuring. Each kernel is measured against the plain path at every
    chunk length; where both were, they split the lengths where their total time is
    least (`split`)."""
    block = first_moe_block(model)
    pairs = kernels.launches(me.NAME) == "cuda" and me.MEASURED_RANGE
    grouped = kernels.launches(mg.NAME) == "cuda" and mg.MIN_PAIRS is None
    if block is None or kernels.backend != "cuda" or not (pairs or grouped):
        return kernels, ""
    announce()
    k = block.top_k
    measured = {}           # name: (what its rule found, its times, why not measured)
    if pairs:
        measured[me.NAME] = _measure(block, me.NAME, _pair_kernel, reach)
    if grouped:
        measured[mg.NAME] = _measure(block, mg.NAME, _grouped_kernel, crossing)
    most, pair_times, pair_why = measured.get(me.NAME, (None, None, ""))
    least, grouped_times, grouped_why = measured.get(mg.NAME, (None, None, ""))
    if pair_times and grouped_times:
        most, least = split(pair_times, grouped_times, k)
    changes, lines = {}, []
    if pairs:
        changes["experts_to"] = most
        lines.append(describe_reach(most, me.MAX_PAIRS, pair_times, k) if pair_times
                     else pair_why)
    if grouped:
        changes["grouped_from"] = least
        lines.append(describe(least, grouped_times, k) if grouped_times else grouped_why)
    for line in lines:
        log.info("%s", line)
    return replace(kernels, **changes), "\n".join(lines)


def _pair_kernel(experts):
    return (lambda x, idx, scores: me.kernel(x, idx, scores, experts, backend="cuda"),
            lambda x, idx, scores: me.applies(x, idx, experts, max_pairs=1 << 30))


def _grouped_kernel(experts):
    return (lambda x, idx, scores: mg.kernel(x, idx, scores, experts, backend="cuda"),
            lambda x, idx, scores: mg.applies(x, idx, experts, min_pairs=1))


def _measure(block, name: str, make: Callable, choose: Callable) -> tuple:
    """Measure kernel `name` against the block's plain path at every chunk length:
    (what `choose` found, {tokens: (plain s, kernel s)}, its line); (None, None, why)
    where the measure raised or the kernel's result is far from the plain path's."""
    experts = block.switch_mlp.quantized_experts()
    num_experts = experts.gate_up[0].shape[0]
    dims = experts.gate_up[0].shape[2] * 32 // experts.bits       # uint32 words a row
    dtype = experts.gate_up[1].dtype                  # the scales': the activations' dtype
    kernel, fits = make(experts)

    def inputs(n: int) -> tuple:
        return routed_inputs(n, block.top_k, num_experts, dims, dtype)
    try:
        found, times = tune(block.gathered_experts, kernel, fits, inputs, block.top_k,
                            SIZES, choose=choose)
        if found is not None and times:
            err = _disagreement(block.gathered_experts, kernel, inputs(max(times)))
            if err > AGREE:
                line = (f"{name} not extended: {err:.2g} from the plain path at "
                        f"{max(times)} tokens")
                log.warning("%s", line)
                return None, None, line
    except (RuntimeError, ValueError) as e:   # the self-test passed it; a load never fails here
        log.warning("%s not measured: %s", name, e)
        return None, None, f"{name} as before (its measure raised: {e})"
    return found, times, ""


def _disagreement(plain: Callable, kernel: Callable, args: tuple) -> float:
    want = plain(*args).astype(mx.float32)
    got = kernel(*args).astype(mx.float32)
    return (mx.abs(got - want).max() / mx.maximum(mx.abs(want).max(), 1e-30)).item()
