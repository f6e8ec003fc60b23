"""kernels/top_p_cut.py (top-p's cut without a sort) against its definition in float64.

The cut is the largest key t with sum(w[key < t]) < target. Checked independently of
both implementations: in float64 numpy, the ids strictly likelier than the cut hold less
than target, and with the cut's own ids they reach it. The reference's float32 sums
miss the exact mass by at most (log2 V + 2) ulps of the row's total (pairwise
summation's bound, Higham 4.2, plus the target's own rounding); the kernel's by at most
`tpc.depth(V)` roundings (its summation tree, derived there). A cut one present key off
misses by that key's weight, orders of magnitude more on these rows.
"""
import shutil

import mlx.core as mx
import numpy as np
import pytest

import kernels.top_p_cut as tpc
from engine.core import sampler
from engine.sampling_params import SamplingParams
from kernels.kernel_set import KernelSet
from kernels.selftest_checks_sampling import check_top_p_cut
from kernels.stand_in import COUNT, gpu_graph

# (rows, V, logit scale, top_p): the real vocabularies, a flat row, a peaked one
GRID = [(1, 248_320, 3 / 0.7, 0.95), (3, 49_152, 3 / 0.7, 0.95), (2, 5003, 0.2, 0.5),
        (4, 300, 12.0, 0.9), (2, 64, 1.0, 0.999)]


def _rows(rows, V, scale, top_p, seed=0):
    """(key, weights, target) as the sampler builds them, numpy; ties in row 1 and dropped
    (-inf) ids in row 2 where there are such rows."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((rows, V)).astype(np.float32) * scale
    if rows > 1:
        logits[1] = np.round(logits[1] * 2) / 2
    if rows > 2:
        logits[2, ::37] = -np.inf
    d = logits - logits.max(-1, keepdims=True)
    w = np.exp2(d * np.float32(1.4426950408889634)).astype(np.float32)
    key = (np.float32(0) - d).view(np.int32)
    target = (top_p * w.astype(np.float64).sum(-1, keepdims=True)).astype(np.float32)
    return key, w, target


def _miss(key, w, target, cut) -> float:
    """max over rows of how far the cut misses its definition, as a share of the mass."""
    w64, cut = w.astype(np.float64), np.asarray(cut).reshape(-1, 1)
    below = np.where(key < cut, w64, 0).sum(-1)
    upto = np.where(key <= cut, w64, 0).sum(-1)
    t = target.astype(np.float64).ravel()
    return float(np.max(np.maximum(below - t, t - upto) / w64.sum(-1)))


def _bound(V: int) -> float:
    return (np.log2(V) + 2) * 2.0 ** -23


def _kernel_bound(V: int, backend: str) -> float:
    return tpc.depth(V, backend) * 2.0 ** -24


@pytest.mark.parametrize("case", GRID)
def test_reference_meets_the_definition(case, cpu_stream):
    key, w, target = _rows(*case)
    cut = tpc.reference(mx.array(key), mx.array(w), mx.array(target))
    assert _miss(key, w, target, np.array(cut)) <= _bound(case[1])


@pytest.mark.parametrize("case", GRID)
def test_kernel_meets_the_definition(backend, case):
    key, w, target = _rows(*case)
    cut = tpc.kernel(mx.array(key), mx.array(w), mx.array(target), backend=backend)
    assert _miss(key, w, target, np.array(cut)) <= _kernel_bound(case[1], backend)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_launches_run_on_the_cpu(tmp_path):
    """kernels/bench/cuda_on_cpu_top_p.py: the CUDA path's 9 launches as the GPU runs
    them (several blocks a row, a row of V % 4 != 0 and one of V % 4 == 0, ties, dropped
    ids), each cut against its definition in float64 (g++ shim)."""
    from kernels.bench.cuda_on_cpu_top_p import emulate
    for case in [(3, 5003, 3.0, 0.95), (3, 8192, 0.2, 0.5)]:
        key, w, target = _rows(*case)
        cut = emulate(key, w, target.ravel(), str(tmp_path))
        assert _miss(key, w, target, cut) <= _kernel_bound(case[1], "cuda")


def test_the_cuda_path_is_nine_launches_of_two_compiled_kernels():
    """A deterministic signature of the CUDA path: 8 passes and the last decision
    (LAUNCHES, what the op count of the app's sampling counts), all 8 passes one kernel
    instance (one compile on a cold start, not 8), at any batch."""
    for rows in (1, 8):
        key, w, target = (mx.array(a) for a in _rows(rows, 5003, 3.0, 0.95))
        with gpu_graph() as ledger:
            tpc.kernel(key, w, target, backend=COUNT)
        assert tpc.LAUNCHES == 9 and ledger.calls == {tpc.NAME: tpc.LAUNCHES}
        assert len(ledger.instances) == 2


def test_kernel_gives_a_row_the_same_cut_in_any_batch(backend):
    key, w, target = _rows(3, 49_152, 3 / 0.7, 0.95)
    args = [mx.array(a) for a in (key, w, target)]
    whole = np.array(tpc.kernel(*args, backend=backend)).ravel()
    alone = [np.array(tpc.kernel(*(a[i:i + 1] for a in args), backend=backend)).item()
             for i in range(3)]
    assert whole.tolist() == alone


def test_a_planted_fault_is_caught(cpu_stream):
    """The next present key after the right cut (one id more kept) misses the definition."""
    key, w, target = _rows(2, 5003, 3.0, 0.95)
    cut = np.array(tpc.reference(mx.array(key), mx.array(w), mx.array(target))).ravel()
    wrong = np.array([key[r][key[r] > cut[r]].min() for r in range(2)])
    assert _miss(key, w, target, wrong) > 100 * _bound(5003)


def test_the_sampler_takes_the_cut_from_the_kernel_set(monkeypatch):
    """Wiring, on any machine: with a kernel set that runs top_p_cut, top-p's keep mask
    comes from the kernel's cut (here its reference) and equals the bisection's."""
    calls = []
    monkeypatch.setattr(tpc, "kernel", lambda *a, backend: calls.append(backend)
                        or tpc.reference(*a))
    logits = mx.array(np.random.default_rng(3).standard_normal((3, 5003)).astype(np.float32) * 3)
    params = [SamplingParams(temperature=0.7, top_p=0.95)] * 3
    plain = np.array(sampler.filtered_probs(logits, params))
    launched = np.array(sampler.filtered_probs(logits, params, KernelSet("cuda")))
    assert calls == ["cuda"]
    np.testing.assert_array_equal(launched, plain)
    off = KernelSet("cuda", ((tpc.NAME, "test"),))
    sampler.filtered_probs(logits, params, off)
    assert calls == ["cuda"]                           # off: the bisection, no launch


def test_calls_outside_the_contract_decline():
    ks = KernelSet("cuda")
    key, w, target = (mx.array(a) for a in _rows(2, 64, 1.0, 0.9))
    assert ks.top_p_cut(key, w.astype(mx.float16), target) is None
    assert ks.top_p_cut(key, w, target[:1]) is None


def test_the_self_test_check_measures_a_miss(monkeypatch):
    """The start-up self-test's check (kernels/selftest.py) on the reference passes, and
    on a cut one bin wide of it fails."""
    monkeypatch.setattr(tpc, "kernel", lambda *a, backend: tpc.reference(*a))
    assert check_top_p_cut("test") <= 1e-5
    monkeypatch.setattr(tpc, "kernel", lambda *a, backend: tpc.reference(*a) + (1 << 20))
    assert check_top_p_cut("test") > 2e-3


def test_the_apps_default_sampling_through_the_kernel_keeps_what_the_bisection_keeps(backend):
    """A new chat's settings on Qwen3.5's vocabulary, B = 8: the ids kept with the kernel
    and by the plain bisection differ at most by ids within float32 rounding of the cut."""
    from engine.settings_spec import chat_defaults
    p = SamplingParams.from_settings(chat_defaults())
    logits = mx.array(np.random.default_rng(8).standard_normal((8, 248_320)).astype(np.float32) * 3)
    plain = np.array(sampler.filtered_probs(logits, [p] * 8))
    launched = np.array(sampler.filtered_probs(logits, [p] * 8, KernelSet(backend)))
    differ = (plain > 0) != (launched > 0)
    assert np.where(differ, np.maximum(plain, launched), 0).sum(-1).max() <= _bound(248_320)
