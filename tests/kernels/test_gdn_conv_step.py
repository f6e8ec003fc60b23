"""The Gated DeltaNet decode conv (kernels/gdn_conv_step.py) against an independent float64
numpy reference, and the model's use of it against its plain path."""
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import close, to_np

import kernels.gdn_conv_step as gcs
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT

# (B, S, (Hk, Hv, Dk, Dv), taps): the real heads (16, 32, 128, 128) at fewer of them; Dk != Dv
GRID = [(1, 3, (2, 4, 128, 128), 4), (5, 8, (1, 2, 32, 64), 4), (3, 4, (2, 2, 64, 32), 3)]
DTYPES = [mx.float32, mx.bfloat16]
EPS = 1e-6


def _make(seed, B, S, heads, K, dtype):
    Hk, Hv, Dk, Dv = heads
    C = 2 * Hk * Dk + Hv * Dv
    rng = np.random.default_rng(seed)
    wide = mx.array(rng.standard_normal((B, 1, C + 40)), dtype)
    qkv = wide[..., 24:24 + C]                       # a strided view, as the split makes it
    weight = mx.array(rng.standard_normal((C, K, 1)) * 0.5, mx.float32)
    pool = mx.array(rng.standard_normal((S, K - 1, C)), dtype)
    slots = mx.array(rng.permutation(S)[:B], mx.int32)
    fresh = mx.array([b % 3 == 1 for b in range(B)])
    return qkv, weight, pool, slots, fresh, heads


def numpy_conv(qkv, weight, pool, slots, fresh, heads):
    """float64: window [old (0 when fresh), x]; depthwise conv, SiLU, split, normalise."""
    Hk, Hv, Dk, Dv = heads
    x = to_np(qkv).reshape(qkv.shape[0], -1).astype(np.float64)
    old = to_np(pool)[to_np(slots)].astype(np.float64)
    old = np.where(to_np(fresh)[:, None, None], 0.0, old)
    window = np.concatenate([old, x[:, None, :]], axis=1)                  # [B, K, C]
    y = (window * to_np(weight)[:, :, 0].T).sum(axis=1)
    y = y / (1 + np.exp(-y))
    B, kd = y.shape[0], Hk * Dk
    q, k = y[:, :kd].reshape(B, Hk, Dk), y[:, kd:2 * kd].reshape(B, Hk, Dk)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + EPS) * Dk ** -0.5
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + EPS)
    return (q, k, y[:, 2 * kd:].reshape(B, Hv, Dv)), window[:, 1:]


def _close(outs, rows, want, dtype) -> bool:
    """float32: a few ulps of values of size ~1; a bf16 output adds its rounding."""
    rtol = 2.0 ** -8 if dtype == mx.bfloat16 else 1e-5
    return (all(close(to_np(g), w, 1e-6, rtol) for g, w in zip(outs, want[0]))
            and close(to_np(rows), want[1], 0.0))          # the states: exact copies


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(case, dtype, cpu_stream):
    args = _make(0, *case, dtype)
    assert _close(*gcs.reference(*args, EPS), numpy_conv(*args), dtype)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, case, dtype):
    args = _make(1, *case, dtype)
    want = numpy_conv(*args)                       # before the kernel writes the pool
    outs = gcs.kernel(*args, EPS, backend=backend)
    mx.eval(outs)
    assert _close(outs, args[2][args[3]], want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_wider_input_is_read_by_its_first_columns(backend, dtype):
    """The joined input projection [B, C + *] in place of its qkv part (no Split node
    before the launch): the kernel reads columns 0..C-1, as numpy on the part."""
    qkv, weight, pool, slots, fresh, heads = _make(1, *GRID[0], dtype)
    wider = mx.concatenate([qkv.reshape(qkv.shape[0], -1),
                            mx.full((qkv.shape[0], 40), 9.0, dtype)], axis=1)     # [B, C + 40]
    want = numpy_conv(qkv, weight, pool, slots, fresh, heads)
    assert gcs.applies(wider, weight, pool, heads)
    outs = gcs.kernel(wider, weight, pool, slots, fresh, heads, EPS, backend=backend)
    mx.eval(outs)
    assert _close(outs, pool[slots], want, dtype)


def test_the_reference_reads_a_wider_input_by_its_first_columns(cpu_stream):
    qkv, weight, pool, slots, fresh, heads = _make(2, *GRID[0], mx.float32)
    wider = mx.concatenate([qkv.reshape(qkv.shape[0], -1), mx.ones((qkv.shape[0], 8))], 1)
    got, want = (gcs.reference(a, weight, pool, slots, fresh, heads, EPS) for a in (wider, qkv))
    assert all(np.array_equal(to_np(g), to_np(w)) for g, w in zip([*got[0], got[1]],
                                                                  [*want[0], want[1]]))


def test_planted_fault_is_caught():
    args = _make(2, 3, 5, (1, 2, 32, 32), 4, mx.float32)
    with mx.stream(mx.cpu):
        (q, k, v), rows = gcs.reference(*args, EPS)
        want = numpy_conv(*args)
        assert _close((q, k, v), rows, want, mx.float32)
        assert not _close((q, k, v + 1e-3), rows, want, mx.float32)
        assert not _close((q, k, v), rows[:, ::-1], want, mx.float32)   # states shifted wrong


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(gcs, "kernel", refuse)
    qkv, weight, pool, slots, fresh, heads = _make(3, 2, 4, (1, 2, 32, 32), 4, mx.float32)
    ks = KernelSet("cuda")
    assert NO_KERNELS.gdn_conv_step(qkv, weight, pool, slots, fresh, heads, EPS) is None
    chunk = mx.concatenate([qkv, qkv], axis=1)                          # T = 2: a prefill
    assert ks.gdn_conv_step(chunk, weight, pool, slots, fresh, heads, EPS) is None
    assert ks.gdn_conv_step(qkv, weight, pool, slots, fresh, (1, 2, 16, 64), EPS) is None
    narrower = qkv[..., :-1]                                            # fewer than C columns
    assert ks.gdn_conv_step(narrower, weight, pool, slots, fresh, heads, EPS) is None


class _ConvByReference(KernelSet):
    """The kernel's contract on any machine: its reference, the pool rows scattered."""
    def gdn_conv_step(self, qkv, weight, pool, slots, fresh, heads, eps):
        if not gcs.applies(qkv, weight, pool, heads):
            return None
        outs, rows = gcs.reference(qkv, weight, pool, slots, fresh, heads, eps)
        pool = mx.array(pool)
        pool[slots] = rows
        return outs, pool


def _model(model_type):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
    from qwen_fixtures import build_model, random_weights, tiny_config
    config = tiny_config(model_type)
    text = config.get("text_config", config)
    text.update(linear_key_head_dim=32, linear_value_head_dim=32)    # inside the contract
    model = build_model(config, random_weights(config, seed=4))
    model.fuse_projections()
    return model


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
def test_the_layer_hands_the_kernel_its_conv_as_its_plain_path_runs_it(model_type):
    """Wiring: decode steps (a fresh row among them) through the kernel's contract give
    the plain path's logits and conv states."""
    from qwen_fixtures import Rows

    from engine.models.base import use_kernels
    model = _model(model_type)
    runs = {}
    others = tuple((n, "test") for n in NAMES if n != gcs.NAME)
    for name, kernels in (("plain", NO_KERNELS), ("kernel", _ConvByReference("cuda", others))):
        use_kernels(model, kernels)
        rows = Rows(model)
        for s in (0, 1):
            rows.start(s)
        out = [rows.forward({0: [5, 6, 7, 8], 1: [9, 10]})]
        rows.start(2)
        for step in range(3):       # seq 2 starts with a one-token prompt: a fresh decode row
            out.append(rows.forward({0: [11 + step], 1: [20 + step], 2: [30 + step]}))
        runs[name] = ([np.array(o) for o in out],
                      [np.array(layer[0]) for layer in rows.cache.states])
    for got, want in zip(runs["kernel"][0], runs["plain"][0]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # The states hold the layers' inputs, which carry the two paths' float32 rounding from
    # the first step on; a wrong slot or shift is off by O(1).
    for got, want in zip(runs["kernel"][1], runs["plain"][1]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_decode_step_counts_one_launch_per_layer_for_its_conv():
    from kernels.stand_in import gpu_graph
    qkv, weight, pool, slots, fresh, heads = _make(5, 2, 4, (1, 2, 32, 32), 4, mx.float32)
    with gpu_graph() as ledger:
        KernelSet(COUNT).gdn_conv_step(qkv, weight, pool, slots, None, heads, EPS)
    assert ledger.calls == {"gdn_conv_step": 1}
