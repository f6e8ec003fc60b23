"""A prompt chunk's forward on the gpu path launches a bounded, length-independent
number of operations (engine/bench/chunk_ops.py counts it as the step loop builds it)."""
from __future__ import annotations

import kernels.moe_experts as me
from engine.bench.chunk_ops import VARIANTS, chunk_ops
from engine.bench.profile_ops import qwen3_5_layout

# One 4-layer block (3 Gated DeltaNet + 1 gated attention, MoE) with the embedding and
# head, as reached on branch chunk-launches (before it: 117 later at 16 tokens, 173 at 64).
# A 16-token chunk's 128 (token, expert) pairs fit the MoE kernel (and since MAX_PAIRS
# is 256, a 32-token one's); longer chunks take the sorted gathered matmuls. Since the
# conv and its SiLU are one fused kernel (engine/models/elementwise.causal_conv_silu), 3
# fewer (one a DeltaNet layer); since the router's int32 ids are viewed as uint32, not
# cast (engine/models/moe._as_uint32), 4 fewer at 64 tokens (one an MoE layer). Since the
# chunk kernel reads its inputs through their strides and turns the raw gates into the
# decay and beta itself (kernels/gated_delta_chunk.py, GATES), 21 fewer (7 a DeltaNet
# layer: 5 Contiguous, of which one copied on a GPU, and the 2 gate kernels). Since the
# chunk's conv is one kernel that writes its states in place (kernels/gdn_conv_chunk.py:
# the gather, concatenate, conv, two norms and the scatter), 15 fewer, 20 padded (the
# padded rows' tail index too).
MOST = {(16, "first"): 73, (16, "later"): 66, (16, "padded"): 68,
        (64, "first"): 125, (64, "later"): 118, (64, "padded"): 120}


def _ops(T: int, variant: str):
    return chunk_ops(qwen3_5_layout(4), T, variant, "gpu")


def test_a_chunk_forward_launches_at_most_the_reached_count():
    counts = {(T, v): sum(_ops(T, v).values()) for T in (16, 64) for v in VARIANTS}
    assert all(counts[key] <= most for key, most in MOST.items()), counts


def test_a_chunk_forward_has_no_convolution():
    """The causal conv is elementwise over shifted views, never MLX's Convolution: on a
    GPU that is cuDNN, which builds and compiles a graph per input shape inside a step."""
    for T in (16, 64):
        for variant in VARIANTS:
            assert "Convolution" not in _ops(T, variant)


def test_a_chunk_forward_does_not_grow_with_its_length():
    """Past the MoE kernel's reach the graph is the same at every length (DESIGN.md:
    prefill must not loop over tokens on the host)."""
    top_k = qwen3_5_layout(4)["text_config"]["num_experts_per_tok"]
    past = [T for T in (16, 32, 64, 128, 256, 512) if T * top_k > me.MAX_PAIRS][:3]
    assert len(past) == 3
    assert len({sum(_ops(T, "later").values()) for T in past}) == 1


def test_per_forward_arrays_are_built_once_not_per_layer():
    """The chunk recurrence's lengths are a constant, its row arrays and its q/k/v and
    raw gates go in as they are (no Contiguous node: the kernel reads strides; no gate
    kernels: it computes the decay and beta), the fresh-row compare and a padded row's
    conv-tail index are built once per forward."""
    later, first, padded = (_ops(64, v) for v in ("later", "first", "padded"))
    assert later["Full"] == first["Full"] == 0
    assert later.get("Contiguous", 0) == first.get("Contiguous", 0) == 0
    assert not any("Exp" in name or name == "CompiledAsTypeSigmoid" for name in later)
    assert first["Equal"] == 1
    eight = chunk_ops(qwen3_5_layout(8), 64, "padded", "gpu")     # two blocks
    assert eight["Arange"] == padded["Arange"] and eight["Equal"] == padded["Equal"]
    assert later["[gated_delta_chunk]"] == 3 and later["[sdpa]"] == 1
    assert later["[gdn_conv_chunk]"] == 3 and "Concatenate" not in later
    assert _ops(64, "later") == later                   # deterministic
