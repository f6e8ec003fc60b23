"""Where a prompt chunk's experts kernels run: measured at load (kernels/moe_grouped_tune.py,
engine/loading/grouped_tune.py): moe_experts up to some pairs, moe_grouped from some. No
timing here: the clock and the measure are scripted; what is checked is the choice made
from given times, that the measured paths compute the model's experts, and that the
choice reaches the model's own kernel set."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from float32_tolerance import assert_close

import engine.loading.grouped_tune as gt
import kernels.moe_experts as me
import kernels.moe_grouped as mg
from engine.bench.profile_ops import ops_by_primitive
from engine.models.base import kernel_set_of, use_kernels
from engine.models.moe import SparseMoeBlock
from kernels.kernel_set import KernelSet
from kernels.moe_grouped_tune import (
    MARGIN,
    crossing,
    describe,
    describe_reach,
    reach,
    routed_inputs,
    split,
    time_both,
    tune,
)
from kernels.stand_in import COUNT, gpu_graph


def test_it_runs_from_the_shortest_length_from_which_it_always_won():
    k = 8
    assert crossing({16: (1.0, 1.5), 32: (1.0, 0.8), 64: (2.0, 1.0), 128: (4.0, 1.1)}, k) == 256
    # a loss at a longer length ends it there: a win below it does not count
    assert crossing({16: (1.0, 0.5), 32: (1.0, 0.95), 64: (2.0, 1.0)}, k) == 512
    assert crossing({16: (1.0, 0.5), 512: (1.0, 1.2)}, k) is None      # lost at the longest
    assert crossing({}, k) is None
    assert crossing({64: (1.0, MARGIN)}, k) == 512                    # the margin, met
    assert crossing({64: (1.0, MARGIN + 1e-6)}, k) is None


def test_the_pair_kernel_runs_up_to_the_longest_length_to_which_it_always_won():
    k = 8
    assert reach({32: (1.0, 0.7), 64: (2.0, 1.5), 128: (4.0, 3.0)}, k) == 1024
    # a loss at a shorter length ends it there: a win past it does not count
    assert reach({32: (1.0, 0.7), 64: (2.0, 1.9), 128: (4.0, 1.0)}, k) == 256
    assert reach({32: (1.0, 1.2), 64: (2.0, 1.0)}, k) is None         # lost at the shortest
    assert reach({}, k) is None
    assert reach({64: (1.0, MARGIN)}, k) == 512
    assert reach({64: (1.0, MARGIN + 1e-6)}, k) is None
    assert describe_reach(1024, 256, {128: (4e-6, 3e-6)}, k).startswith("moe_experts up to 1024 pairs")
    assert "no longer chunk faster" in describe_reach(None, 256, {}, k)
    assert "no longer chunk faster" in describe_reach(128, 256, {}, k)


def test_where_both_kernels_were_measured_each_length_goes_to_the_faster():
    """Each faster than the plain path everywhere (as the tensor-core moe_grouped may be
    beside moe_experts), the pair kernel up to where the grouped one overtakes it; measured
    against the plain path alone, moe_experts kept every length and moe_grouped none."""
    k = 8
    pair = {32: (1.0, 0.7), 64: (2.0, 1.4), 128: (4.0, 2.8), 256: (8.0, 5.6)}
    grouped = {32: (1.0, 0.8), 64: (2.0, 1.2), 128: (4.0, 1.0), 256: (8.0, 1.5)}
    assert reach(pair, k) == 2048 and crossing(grouped, k) == 256        # overlapping
    assert split(pair, grouped, k) == (256, 512)
    # a length neither takes by MARGIN runs the plain path, and ends both runs there
    grouped[64] = (2.0, 1.9)
    pair[64] = (2.0, 1.95)
    assert split(pair, grouped, k) == (256, 1024)
    # a length where the pair kernel wins past where it lost: it cannot take that length
    # (its range is a prefix), so the grouped kernel does, not the plain path
    grouped[64] = (2.0, 1.2)
    pair[128] = (4.0, 0.5)
    assert split(pair, grouped, k) == (256, 512)
    assert split({}, {}, k) == (None, None)


def test_a_near_tie_at_one_length_leaves_no_length_to_the_plain_path():
    """Session 45's H100, measured at load (plain/kernel us a layer): at 32 tokens the
    grouped kernel's share 0.633 edged the experts kernel's 0.647, and cutting each
    range at the first length the other won left 64 tokens (0.41 and 0.60 of the plain
    path's time) to the plain path."""
    k = 8
    pair = {32: (835, 540), 64: (1108, 456), 128: (1860, 940), 256: (3325, 1458),
            512: (6210, 2547)}
    grouped = {32: (906, 574), 64: (1289, 776), 128: (2051, 885), 256: (3411, 798),
               512: (5853, 1312)}
    assert split(pair, grouped, k) == (512, 1024)
    # a kernel never takes a length it did not win against the plain path by MARGIN
    slow = {n: (p, p) for n, (p, _) in grouped.items()}
    assert split(pair, slow, k) == (4096, None)
    assert split(slow, grouped, k) == (None, 256)


def test_the_two_paths_alternate_and_their_medians_are_kept():
    calls, now = [], [0.0]
    cost = {"plain": 3.0, "grouped": 1.0}

    def path(name):
        def run(x):
            calls.append(name)
            now[0] += cost[name] + (10.0 if calls.count(name) == 1 else 0.0)  # compiles
            return x + 1
        return run
    plain, grouped = time_both(path("plain"), path("grouped"), (mx.zeros(2),), runs=3,
                               clock=lambda: now[0])
    assert (plain, grouped) == (3.0, 1.0)
    assert calls == ["plain", "grouped"] * 4


def test_lengths_it_does_not_fit_are_not_measured():
    measured = []

    def timer(plain, grouped, args):
        measured.append(args[0])
        return {16: (1.0, 2.0), 64: (2.0, 1.0)}[args[0]]
    least, times = tune(None, None, lambda n: n != 32, lambda n: (n,), 8, (16, 32, 64), timer)
    assert measured == [16, 64] and least == 512 and set(times) == {16, 64}
    line = describe(least, times, 8)
    assert line.startswith("moe_grouped from 512 pairs") and "128: 1000000/2000000 us" in line
    assert describe(None, {}, 8).startswith("moe_grouped off (not faster here)")


def test_random_routing_picks_k_distinct_experts_a_token():
    x, idx, scores = routed_inputs(64, 8, 32, 128, mx.bfloat16)
    assert x.shape == (64, 128) and x.dtype == mx.bfloat16 and idx.dtype == mx.int32
    assert all(len(set(row)) == 8 for row in idx.tolist())
    assert mx.allclose(scores.sum(axis=-1), mx.ones(64)).item()


def _model():
    """A one-block 'model': the layer tune_experts_paths measures on, quantized as loaded."""
    mx.random.seed(0)
    block = SparseMoeBlock(dims=256, hidden=128, shared_hidden=64, num_experts=16, top_k=4,
                           norm_topk_prob=True)
    nn.quantize(block, group_size=64, bits=4)
    block.fuse_projections()
    mx.eval(block.parameters())
    model = nn.Sequential(block)
    return model, block


def _by_reference(monkeypatch):
    """No CUDA here: each kernel computes as its reference."""
    monkeypatch.setattr(mg, "kernel", lambda x, idx, scores, experts, backend:
                        mg.reference(x, idx, scores, experts))
    monkeypatch.setattr(me, "kernel", lambda x, idx, scores, experts, backend:
                        me.reference(x, idx, scores, experts))


def test_at_load_the_measured_choices_go_into_the_models_own_kernel_set(monkeypatch):
    """The measured paths compute the block's routed experts (each kernel as its
    reference here: no CUDA), and the answers become the model's `experts_to` and
    `grouped_from`: the pair kernel measured past its decode range, the grouped one."""
    model, block = _model()
    cuda = KernelSet("cuda")
    use_kernels(model, cuda)
    _by_reference(monkeypatch)
    seen, announced = [], []
    # (plain, kernel) seconds a layer at 100 and 300 tokens: the pair kernel the faster
    # at 100 (400 pairs), the grouped one at 300 (1,200), both faster than the plain path
    times = {"reach": {100: (2.0, 1.0), 300: (4.0, 3.5)},
             "crossing": {100: (2.0, 1.6), 300: (4.0, 1.0)}}

    def scripted(plain, kernel, applies, inputs, k, sizes=(), timer=None, choose=crossing):
        args = inputs(300)                  # 1,200 pairs: past the decode range
        seen.append(dict(plain=plain(*args), kernel=kernel(*args), fits=applies(*args), k=k))
        return choose(times[choose.__name__], k), times[choose.__name__]
    monkeypatch.setattr(gt, "tune", scripted)
    tuned, note = gt.tune_experts_paths(model, cuda, lambda: announced.append(1))
    assert (tuned.experts_to, tuned.grouped_from) == (400, 1200)
    assert tuned.backend == "cuda" and tuned.off == cuda.off and announced == [1]
    assert note.split("\n")[0].startswith("moe_experts up to 400 pairs")
    assert note.split("\n")[1].startswith("moe_grouped from 1200 pairs")
    for s in seen:
        assert s["fits"] and s["k"] == 4
        # the sums on a value's path: over D (gate, up), over I (down), over the k experts
        assert_close(s["plain"], s["kernel"], depth=256 + 128 + 4, what="plain vs kernel")
    # a bench's forced range, another backend, or no MoE layer: nothing measured
    monkeypatch.setattr(mg, "MIN_PAIRS", 64)
    monkeypatch.setattr(me, "MEASURED_RANGE", False)
    assert gt.tune_experts_paths(model, cuda) == (cuda, "")
    monkeypatch.setattr(mg, "MIN_PAIRS", None)
    monkeypatch.setattr(me, "MEASURED_RANGE", True)
    assert gt.tune_experts_paths(model, KernelSet("metal")) == (KernelSet("metal"), "")
    assert gt.tune_experts_paths(nn.Sequential(nn.Linear(4, 4)), cuda) == (cuda, "")


def test_a_kernel_far_from_the_plain_path_is_not_extended(monkeypatch):
    """Faster but wrong (as an index overflow past the tested lengths would be): the
    range stays as it was, and the line says why."""
    model, _ = _model()
    _by_reference(monkeypatch)
    monkeypatch.setattr(me, "kernel", lambda x, idx, scores, experts, backend:
                        2 * me.reference(x, idx, scores, experts))
    monkeypatch.setattr(gt, "tune", lambda *a, choose=crossing, **kw:
                        (1024 if choose is reach else None, {64: (2.0, 1.0)}))
    tuned, note = gt.tune_experts_paths(model, KernelSet("cuda"))
    assert tuned.experts_to is None and "moe_experts not extended" in note


def _launches_past_max_pairs(kernel: str, field: str, settings) -> dict:
    """{setting: launches of `kernel`} for a 96-token chunk (384 pairs: past moe_experts'
    MAX_PAIRS) through the block, the kernel set's `field` at each setting; the model
    keeps the set it was given."""
    model, block = _model()
    x = mx.zeros((96, 256))
    counts = {}
    for value in settings:
        use_kernels(model, KernelSet(COUNT, **{field: value}))
        with gpu_graph() as ledger:
            ops_by_primitive(block(x))
            counts[value] = ledger.calls.get(kernel, 0)
        assert getattr(kernel_set_of(model), field) == value
    return counts


def test_the_kernel_sets_experts_range_decides():
    """Past MAX_PAIRS a chunk's whole block (routed, shared expert, residual) is the
    pair kernel's two launches where the range measured at load reaches its pairs."""
    counts = _launches_past_max_pairs(me.NAME, "experts_to", (None, 383, 384))
    assert counts == {None: 0, 383: 0, 384: 2}
    assert KernelSet(COUNT, experts_to=64).experts_max_pairs() == me.MAX_PAIRS


def test_the_kernel_sets_threshold_decides_and_its_status_says_so():
    counts = _launches_past_max_pairs(mg.NAME, "grouped_from", (None, 385, 384))
    assert counts == {None: 0, 385: 0, 384: 2}
    assert KernelSet(COUNT, grouped_from=128).status()[mg.NAME] == COUNT
    assert KernelSet(COUNT).status()[mg.NAME].startswith("reference (not faster")


@pytest.fixture(autouse=True)
def _no_forced_threshold(monkeypatch):
    monkeypatch.setattr(mg, "MIN_PAIRS", None)
    monkeypatch.setattr(me, "MEASURED_RANGE", True)


def test_a_measure_that_raises_leaves_it_off_and_the_load_going(monkeypatch):
    model, _ = _model()

    def broken(*a, **kw):
        raise RuntimeError("Failed to compile kernel")
    monkeypatch.setattr(gt, "tune", broken)
    tuned, note = gt.tune_experts_paths(model, KernelSet("cuda"))
    assert tuned.grouped_from is None and tuned.experts_to is None and "raised" in note
