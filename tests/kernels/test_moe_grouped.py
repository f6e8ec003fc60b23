"""A prompt chunk's routed experts grouped by expert (kernels/moe_grouped.py) against an
independent float64 numpy reference (nibbles unpacked by hand, not mx.dequantize)."""
import os
import shutil

import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np

import kernels.moe_grouped as mg
from engine.bench.profile_ops import ops_by_primitive
from engine.models.base import use_kernels
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.selftest_checks_moe import random_experts
from kernels.stand_in import COUNT, gpu_graph

ULP32 = 2.0 ** -24
# (N, E, K, D, I, group, pad rows): the real shapes (D 2048, I 512, top-8, group 64) at 32
# experts and a 64-token chunk; down rows of 4 lanes (I 128); group 32 and 128
GRID = [(64, 32, 8, 2048, 512, 64, 0), (13, 16, 4, 256, 128, 32, 32),
        (9, 8, 2, 128, 2048, 128, 0)]
DTYPES = [mx.float32, mx.bfloat16]


def _make(seed, N, E, K, D, hidden, group, pad, dtype):
    """(x, idx, scores, experts): expert 1 in every row, expert E - 1 in none; the ids
    int32 as the router kernel returns them."""
    experts = random_experts(mx.random.key(seed), E, D, hidden, group, pad)
    rng = np.random.default_rng(seed)
    x = mx.array(rng.standard_normal((N, D)), dtype=dtype)
    others = [e for e in range(E - 1) if e != 1]
    idx = np.stack([np.concatenate([[1], rng.choice(others, K - 1, replace=False)])
                    for _ in range(N)])
    scores = mx.array(rng.dirichlet(np.ones(K), size=N), dtype=mx.float32)
    return x, mx.array(idx, mx.int32), scores, experts


def _expected(x, idx, scores, experts):
    return numpy_ref.moe_experts(to_np(x), to_np(idx), to_np(scores),
                                 [to_np(a) for a in experts.gate_up],
                                 [to_np(a) for a in experts.down], experts.hidden)


def _close(y, want, mag, dtype) -> bool:
    """Float32 sums: within 64 ulps of the sum of |terms|; a bf16 output adds its own
    rounding, 2**-8 relative at most."""
    rtol = 2.0 ** -8 if dtype == mx.bfloat16 else 0.0
    return numpy_ref.close(to_np(y), want, 64 * ULP32 * mag + 1e-30, rtol)


@pytest.mark.parametrize("case", GRID[1:])
def test_reference_matches_numpy(case, cpu_stream):
    args = _make(0, *case, mx.float32)
    assert _close(mg.reference(*args), *_expected(*args), mx.float32)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, case, dtype):
    if backend != "cuda":
        pytest.skip("moe_grouped has a CUDA source only")
    args = _make(1, *case, dtype)
    assert mg.applies(args[0], args[1], args[3], min_pairs=1)
    assert _close(mg.kernel(*args, backend=backend), *_expected(*args), dtype)


def _emulation_cases():
    from kernels.bench.cuda_on_cpu_grouped import CASES
    return CASES


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
@pytest.mark.parametrize("case", _emulation_cases())
def test_the_cuda_body_on_the_cpu_matches_numpy(case):
    """kernels/bench/cuda_on_cpu_grouped.py: the body as written, a block's threads as
    std::threads, the tf32 MMA computed from every lane's registers by the PTX fragment
    tables; an expert with no pair, one every token picks (several passes), groups of 32,
    64 and 128, float32 and bf16 x, 1,200 pairs. Within the tolerance of the rounding the
    kernel makes (float32 sums, float32 operands as two tf32 parts); ~1-4 s a case."""
    from kernels.bench.cuda_on_cpu_grouped import emulate
    assert emulate(*case[:8], dtype=case[8]) <= 1.0


# (where, text, planted): a fault each in the kernel's fragments, its operand split, its
# staging order, its fold, and in the shim's reading of the PTX layout
FAULTS = [("header", "a[m][1] = nibble_tf32(q[m][1][0], ja);", "a[m][1] = nibble_tf32(q[m][0][0], ja);"),
          ("header", "mma_tf32(part[m][n], a[m], lo);", ""),
          ("header", "(lane ^ (4 * mm / WL))", "(lane)"),
          ("header", "i % 2 ? x1 : x0", "i % 2 ? x0 : x1"),
          ("pre", "const int reg = row < 4 ? 0 : 1;", "const int reg = row < 4 ? 1 : 0;")]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
@pytest.mark.parametrize("fault", FAULTS, ids=["A fragment", "h's lo part", "staging order",
                                               "token sums", "shim's B layout"])
def test_the_emulation_sees_a_planted_fault(fault):
    """The check of the check: each planted fault takes the result past its tolerance
    (a dropped lo part: ~19x; layout faults: ~1e5x and more)."""
    from kernels.bench.cuda_on_cpu_grouped import emulate
    from kernels.bench.cuda_shim import PRE
    from kernels.moe_grouped_src import CUDA_DOWN, CUDA_GATE_UP, CUDA_HEADER
    where, text, planted = fault
    header, pre = CUDA_HEADER, PRE
    if where == "header":
        assert text in header
        header = header.replace(text, planted)
    else:
        assert text in pre
        pre = pre.replace(text, planted)
    assert emulate(6, 8, 3, 128, 128, 32, 32, 0, "float32",
                   sources=(header, CUDA_GATE_UP, CUDA_DOWN), pre=pre) > 1.0


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
@pytest.mark.skipif(os.environ.get("TANDEM_SLOW_EMULATION") != "1",
                    reason="~70 s on two cores: TANDEM_SLOW_EMULATION=1 runs it")
def test_the_cuda_body_at_the_real_shapes():
    """E=256, D=2048, I=512, group 64, bf16, 1,024 pairs; 8 experts' blocks (one every
    token picks: 128 pairs in 8 passes; one none picks)."""
    from kernels.bench.cuda_on_cpu_grouped import real
    assert real() <= 1.0


@pytest.mark.parametrize("shape", [(2048, 512, 64), (2048, 768, 128), (256, 128, 32),
                                   (128, 2048, 128), (64, 512, 64), (96, 64, 32)])
def test_the_launch_plan_covers_every_row_once(shape):
    """Each launch's blocks x warps x 16-row fragment tiles are the expert's rows exactly,
    a K-chunk is whole steps dividing K, and the staged tokens fit static shared memory."""
    D, hidden, gs = shape
    p = mg.plan(D, hidden, gs)
    gu, dn = dict(p["gate_up"]), dict(p["down"])
    (b1, b2), (t1, t2) = p["blocks"], p["threads"]
    assert b1 * (t1 // 32) * 16 == hidden and gu["WPB"] == t1 // 32
    assert b2 * (t2 // 32) * 16 * dn["MT"] == D and dn["WPB"] == t2 // 32
    step = 64 if gs % 64 == 0 else 32
    for kc, k in ((gu["KC"], D), (dn["KC"], hidden)):
        assert kc % step == 0 and k % kc == 0
    for nt, kc in ((gu["NT"], gu["KC"]), (dn["NT"], dn["KC"])):
        assert nt * 8 * kc * 4 + nt * 8 * 4 <= 48 * 1024


def test_off_until_measured_and_the_contract(monkeypatch):
    """MIN_PAIRS None: never (the plain path's sorted matmuls); from MIN_PAIRS pairs on
    CUDA only; 8-bit experts never; any hidden size of whole groups (16-row tiles)."""
    x, idx, scores, experts = _make(2, *GRID[1], mx.float32)      # 13 x 4 = 52 pairs
    assert mg.MIN_PAIRS is None and not mg.applies(x, idx, experts)
    monkeypatch.setattr(mg, "MIN_PAIRS", 52)
    assert mg.applies(x, idx, experts)
    assert not mg.applies(x[:12], idx[:12], experts)              # 48 pairs
    assert KernelSet("metal").moe_grouped(x, idx, scores, experts) is None
    assert NO_KERNELS.moe_grouped(x, idx, scores, experts) is None
    eight_bit = mg.QuantExperts(experts.gate_up, experts.down, 128, 32, bits=8)
    assert not mg.applies(x, idx, eight_bit, min_pairs=1)
    small = random_experts(mx.random.key(3), 4, 256, 64, 32)      # I 64: 4 fragment tiles
    assert mg.applies(x, idx, small, min_pairs=1)


def _moe_block():
    import mlx.nn as nn

    from engine.models.moe import SparseMoeBlock
    mx.random.seed(0)
    block = SparseMoeBlock(dims=128, hidden=128, shared_hidden=64, num_experts=32, top_k=4,
                           norm_topk_prob=True)
    nn.quantize(block, group_size=64, bits=4)
    block.fuse_projections()                  # as at load: gate+up joined
    use_kernels(block, KernelSet(COUNT))
    mx.eval(block.parameters())
    return block


def test_a_chunk_runs_two_launches_not_the_sorted_matmuls(monkeypatch):
    """The model's MoE block on a 96-token chunk (384 pairs: past moe_experts' 256),
    counted on the stand-in backend: the
    grouped kernel's two launches, an argsort and a gather of the sorted ids, and the sum
    over k, in place of the sorted path's gathered matmuls, its two argsorts and gathers."""
    block, x = _moe_block(), mx.zeros((96, 128))
    counts = []
    for least in (None, 256):
        monkeypatch.setattr(mg, "MIN_PAIRS", least)
        with gpu_graph() as ledger:
            ops = ops_by_primitive(block(x))
            counts.append((ops, dict(ledger.calls)))
    (plain, plain_calls), (grouped, grouped_calls) = counts
    assert plain["GatherQMM"] == 2 and mg.NAME not in plain_calls
    assert grouped_calls[mg.NAME] == 2
    assert grouped.get("GatherQMM", 0) == 0 and grouped["ArgSort"] == 1
    assert (sum(grouped.values()) + sum(grouped_calls.values())
            < sum(plain.values()) + sum(plain_calls.values()))
