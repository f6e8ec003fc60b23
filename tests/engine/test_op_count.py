"""The op counter counts the GPU graph honestly: stand-ins for what a CPU cannot build."""
from __future__ import annotations

import mlx.core as mx
import pytest

from engine.bench import profile_ops
from kernels.kernel_set import KernelSet
from kernels.stand_in import COUNT, gpu_graph, stand_in


def test_a_stand_in_is_one_counted_launch_with_the_real_shapes():
    x, w = mx.ones((2, 3, 8), mx.bfloat16), mx.ones((8,), mx.bfloat16)
    mx.eval(x, w)
    with gpu_graph() as ledger:
        y = mx.fast.rms_norm(x + 1, w, 1e-5)
        q = mx.fast.rope(y, 8, traditional=False, base=1e4, scale=1.0, offset=3)
        ops = profile_ops.ops_by_primitive(q * 2)
    assert (y.shape, y.dtype, q.shape) == (x.shape, mx.bfloat16, x.shape)
    assert ledger.calls == {"rms_norm": 1, "rope": 1}
    assert ops == {"Add": 1, "Multiply": 1}              # the fallbacks' ops are gone
    assert mx.fast.rms_norm(x, w, 1e-5).shape == x.shape  # mx.fast restored on exit


def test_the_cpu_graph_of_a_fast_op_is_its_fallback():
    x, w = mx.ones((2, 8)), mx.ones((8,))
    assert profile_ops.count_ops(mx.fast.rms_norm(x + 1, w, 1e-5)) > 3


def test_stand_ins_are_refused_outside_the_counter():
    with pytest.raises(RuntimeError, match="gpu_graph"):
        stand_in("k", [mx.ones(2)], [(2,)], [mx.float32])


def test_the_count_backend_launches_each_kernel_as_one_stand_in():
    logits = mx.random.normal((3, 64))
    with gpu_graph() as ledger:
        idx, weights = KernelSet(COUNT).moe_route(logits, 4)
    assert (idx.shape, idx.dtype, weights.dtype) == ((3, 4), mx.int32, mx.float32)
    assert ledger.calls == {"moe_route": 1}


def test_a_qwen_block_on_the_gpu_path_launches_the_kernels():
    """One 4-layer block (3 Gated DeltaNet + 1 attention, MoE): each kernel where it
    applies, every rms_norm one launch; the count is deterministic."""
    ops = profile_ops.ours(profile_ops.qwen3_5_layout(4), 1, 32, "gpu")
    # GDN: the step and its gated output norm one gated_delta_step_norm
    assert ops["[gated_delta_step_norm]"] == ops["[gdn_conv_step]"] == 3
    assert ops["[gated_delta_step]"] == ops["[gated_rms_norm]"] == 0
    # the MoE block after its router: two launches, the routing inside (kernels/moe_block.py)
    assert ops["[moe_block]"] == 2 * 4 and ops["[moe_route]"] == ops["[moe_experts]"] == 0
    assert ops["[paged_attention_p1]"] == ops["[paged_attention_p2]"] == 1
    # input norms and the final one (GDN q/k inside the conv kernel; attention q/k norms,
    # rotary and the K/V writes one attention_prep); each layer's residual add and
    # post-mixer norm one add_rms_norm
    assert ops["[rms_norm]"] == 4 * 1 + 1
    assert ops["[add_rms_norm]"] == 4
    assert ops["[attention_prep]"] == 1 and ops["[rope]"] == ops["Scatter"] == 0
    for op in ("RMSNorm", "Softmax", "ArgPartition", "Rsqrt", "Full", "Contiguous"):
        assert ops[op] == 0, op
    assert ops == profile_ops.ours(profile_ops.qwen3_5_layout(4), 1, 32, "gpu")


def test_without_the_fused_step_norm_a_block_runs_the_step_and_the_norm(monkeypatch):
    """The fused kernel off (its self-test failed, say): each Gated DeltaNet layer launches
    gated_delta_step and gated_rms_norm as before it existed, and nothing else in the step
    changes: the fused kernel swaps exactly those two launches for one."""
    import engine.bench.counted_model as counted
    on = profile_ops.ours(profile_ops.qwen3_5_layout(4), 1, 32, "gpu")
    monkeypatch.setattr(counted, "KernelSet",
                        lambda backend: KernelSet(backend, (("gated_delta_step_norm", "test"),)))
    off = profile_ops.ours(profile_ops.qwen3_5_layout(4), 1, 32, "gpu")
    assert off - on == {"[gated_delta_step]": 3, "[gated_rms_norm]": 3}
    assert on - off == {"[gated_delta_step_norm]": 3}
    assert sum(off.values()) - sum(on.values()) == 3


def test_a_quantized_embedding_row_is_one_dequantize_launch():
    w, scales, biases = mx.quantize(mx.random.normal((8, 64)), 32, 4)
    rows = mx.array([3, 5])
    with gpu_graph() as ledger:
        out = mx.dequantize(w[rows], scales[rows], biases[rows], 32, 4)
    assert (out.shape, out.dtype, ledger.calls) == ((2, 64), mx.float32, {"dequantize": 1})


def test_sampling_at_the_apps_defaults_is_counted_beside_the_forward():
    """A decode step samples after its forward; at the app's defaults (temperature 0.7,
    top-p 0.95) the top-p bisection is most of it: ~370 ops uncompiled at any batch, 31
    steps of a masked two-level sum (engine/core/sampler.py), against 2 for greedy. The
    bound catches a sampler that grows with the vocabulary or the batch."""
    app = dict(temperature=0.7, top_p=0.95)
    assert profile_ops.sampler_ops(1, dict(temperature=0.0)) <= 2
    counts = [profile_ops.sampler_ops(b, app, vocab=4096) for b in (1, 8)]
    assert abs(counts[0] - counts[1]) <= 2 and max(counts) <= 400, counts
    assert mx.compile(lambda x: x + 1)(mx.array(1)).item() == 2    # compile is back on


def test_on_a_gpu_the_apps_top_p_cut_and_draw_are_a_few_launches():
    """With the kernel set a GPU loads, top-p's cut and the ties it keeps are
    kernels/top_p_cut's LAUNCHES (10: a pass a launch over the whole GPU, then the ties)
    instead of the bisection (~190 launches compiled on the H200, session 11) and a
    running sum, the draw kernels/cdf_draw's one instead of a running sum and a count
    over it, and the sampling graph runs through mx.compile (engine/core/sampler.py,
    `_compiled_draw`): the app's sampling costs 14-15 ops a step at any batch besides
    those 11 launches (`sampler_ops` counts no stand-in launch). Before: 20-21 ops with
    the ties' running sum (session 34's first cut: 20 + 10 = 30 kernels on the H100),
    23-24 (session 32), 49 as a plain graph (session 31); temperature alone 7-8."""
    import kernels.top_p_cut as tpc
    from engine.core.sampler import RowSampler, sample_batch
    from engine.sampling_params import SamplingParams
    app = dict(temperature=0.7, top_p=0.95)
    counts = [profile_ops.sampler_ops(b, app, vocab=4096, gpu=True) for b in (1, 8)]
    assert abs(counts[0] - counts[1]) <= 2 and max(counts) <= 16, counts
    states = [RowSampler(SamplingParams(**app)) for _ in range(3)]
    launches = {"top_p_cut": tpc.LAUNCHES, "cdf_draw": 1}
    with gpu_graph() as ledger:
        plain = profile_ops.count_ops(sample_batch(mx.zeros((3, 4096)), states,
                                                   KernelSet(COUNT), compiled=False))
    assert ledger.calls == launches and plain > 2 * max(counts), (plain, counts)
    with gpu_graph() as ledger:
        sample_batch(mx.zeros((3, 4096)), states, KernelSet(COUNT), compiled=True)
    assert ledger.calls == launches


def test_attention_prep_runs_only_where_the_paged_kernel_reads_its_pools():
    """attention_prep writes the K/V pools in place; on a GPU only a reader that takes its
    q is ordered after those writes (kernels/README.md, "Ordering on a GPU"). Where the
    paged kernel does not apply (head dim 16), the plain attention would gather the pools
    with no such edge: the H200 ran it before the write (session 7). There, the K/V go
    through the plain path's scatters instead (declared outputs, ordered)."""
    config = profile_ops.qwen3_5_layout(4)
    config["text_config"]["head_dim"] = 16
    ops = profile_ops.ours(config, 1, 32, "gpu")
    assert ops["[attention_prep]"] == ops["[paged_attention_p1]"] == 0
    assert ops["Scatter"] == 2                          # write_kv: one for K, one for V


def test_attention_prep_is_refused_by_the_kernel_set_without_the_paged_kernel():
    """The same rule at the dispatch: the prep launches only with the paged kernel on and
    applying to the q it will make."""
    def prep(ks, d):
        B, hq, hkv = 2, 4, 2
        q, k, v = mx.zeros((B, hq * 2 * d)), mx.zeros((B, hkv * d)), mx.zeros((B, hkv * d))
        pool = mx.zeros((64, hkv, d))
        return ks.attention_prep(q, k, v, mx.ones((d,)), mx.ones((d,)), 1e-6,
                                 mx.zeros((B,), mx.int32), mx.array([1, 2]), pool, pool,
                                 (hq, hkv, d, 2 * d), d, 1e4)
    with gpu_graph():
        assert prep(KernelSet(COUNT), 32) is not None
        assert prep(KernelSet(COUNT), 16) is None
        assert prep(KernelSet(COUNT, (("paged_attention", "test"),)), 32) is None


def _decode_graph_nodes(config: dict):
    """Node kinds of a compiled B=1 decode step's graph on a GPU (stand-in launches)."""
    import io
    import re
    from collections import Counter

    from engine.config import EngineConfig
    from engine.core.runner import Runner
    from engine.core.sequence import Sequence
    model = profile_ops.counted_model(config, "gpu")
    runner = Runner(model, EngineConfig(max_num_seqs=1, page_size=16, num_pages=64,
                                        compile_decode=True))
    mx.eval(runner.cache_arrays())
    s = Sequence(0, list(range(32)), None)
    s.pages, s.slot, s.num_computed = list(range(1, 5)), 0, 31
    with gpu_graph():
        dot = io.StringIO()
        mx.export_to_dot(dot, runner.decode([s]), *runner.cache_arrays())
    return Counter(re.findall(r'label ="?([A-Za-z_]+)[^"]*"?, shape=rectangle',
                              dot.getvalue()))


def test_a_decode_step_builds_no_view_round_trips():
    """Every node of a compiled step's graph is replayed on the host each step, views
    included: a decode group's Gated DeltaNet runs on [B, *] arrays from its projections
    to its output (engine/models/gated_deltanet._decode_by_kernels), not through
    [B, 1, *] views expanded and squeezed back (9 nodes a layer)."""
    nodes = _decode_graph_nodes(profile_ops.qwen3_5_layout(4))  # 3 Gated DeltaNet + 1 attention
    assert nodes["ExpandDims"] == 0 and nodes["Squeeze"] <= 4
    # 137 before session 23; 92 until session 27, where no-op reshapes (a -1 shape onto the
    # same shape: engine/models/shapes.py), the reshapes after the Gated DeltaNet step and
    # the paged attention (their outputs declared [B, H*D]) and z's before the step (its
    # kernel reads z [B, Hv*Dv]) went: 75; the in-place pool writes ordered by one Depends
    # for the forward, not one a launch (kernels/pool_order.py): 69; the MoE block reads
    # the router's joined output unsplit (its gate a column): 65; the paged attention
    # reads its output gate from the joined q+gate projection (GATED=2): 63; the Gated
    # DeltaNet's conv and step kernels read qkv, z, b and a as columns of the joined
    # input projection (no Split): 60; the attention's prep kernel reads k and v as columns
    # of its joined projection too: 59
    assert nodes["Reshape"] <= 5 and nodes["Split"] == 0 and nodes["Slice"] <= 5
    assert sum(nodes.values()) <= 59


def test_the_built_in_models_decode_step_builds_no_view_round_trips():
    """The built-in model's layout (llama family, no q/k norms) on a GPU: q/k rotary and
    the K/V writes in the prep kernel (NORM=0), the paged attention's output [B, Hq*D];
    not [B, H, T, D] views, two ropes and two scatters a layer (~40 nodes a layer before
    session 27, 1,220 a step for SmolLM2's 30 layers; 381 after: q, k, v read as columns of
    the joined projection). A layer's MLP
    output is added by the next layer's input norm (kernels/add_rms_norm), not by an Add
    of its own: 352 (Adds 31 -> 2 a step, whatever the layers); the MLP's SwiGLU reads
    the joined gate_up output (kernels/swiglu_joined), no Split: 322."""
    nodes = _decode_graph_nodes(profile_ops.llama_layout(2))
    assert nodes["Transpose"] == nodes["Scatter"] == nodes["Broadcast"] == 0
    assert nodes["Split"] == 0 and nodes["Add"] <= 2 and sum(nodes.values()) <= 42


def test_a_dense_qwen3_5_decode_step_adds_its_residuals_in_the_norms():
    """Qwen3.5's dense layers (num_experts 0): a layer's MLP output is added by the next
    layer's input norm (kernels/add_rms_norm) and its SwiGLU reads the joined gate_up
    output (kernels/swiglu_joined): no Add nor Split a layer (4 layers: 60 nodes)."""
    config = profile_ops.qwen3_5_layout(4)
    text = config["text_config"]
    for key in [k for k in text if "expert" in k or k == "moe_intermediate_size"]:
        del text[key]
    text.update(num_experts=0, intermediate_size=128)
    nodes = _decode_graph_nodes(config)
    assert nodes["Split"] == 0 and nodes["Add"] <= 2 and sum(nodes.values()) <= 60


def test_at_one_decode_row_each_layers_input_norm_is_inside_its_projection():
    """kernels/qmv_normed: at B=1 (where the host bounds the step) each layer's input
    RMSNorm is launched inside its joined input projection, one launch a layer fewer;
    from two rows the norm and the product are two launches again. A hidden size the
    kernel takes (K % 1,024 == 0): the real model's 2,048. The final norm goes into the
    head's product the same way. And kernels/add_norm_qmv: each MoE layer's residual add,
    its norm and its router's product are one launch at B=1 (four launches a layer fewer
    in all: 160 a step of the 40-layer model), two again from two rows. The count has
    every kernel on, those kept off at load too (kernels/backend.OFF_AT_LOAD)."""
    config = profile_ops.qwen3_5_counted_layout(4)
    one, two = (profile_ops.ours(config, b, 32, "gpu") for b in (1, 2))
    assert one["[qmv_normed]"] == 4 + 1 and one["[rms_norm]"] == 0   # the head's too
    assert two["[qmv_normed]"] == 0 and two["[rms_norm]"] == 4 + 1
    assert one["[add_norm_qmv]"] == 4 and one["[add_rms_norm]"] == 0
    assert two["[add_norm_qmv]"] == 0 and two["[add_rms_norm]"] == 4
    # MLX's products: 3 a layer (input, output, the MoE block's router) less the 4
    # normed and, at one row, the 4 routers
    assert one["QuantizedMatmul"] == 3 * 4 - 4 - 4
