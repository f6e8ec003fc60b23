"""kernels/cdf_draw.py (a sampling row's inverse-CDF draw in one launch) against its
definition in float64 and against the sampler's plain draw.

The definition: the drawn id has weight, and t = u x total lies in its slice of the
exact running sum. The kernel compares float32 sums at most `cd.depth(V)` roundings
deep, so its slice edges (and t) may be off by depth(V) x 2**-24 of the total, and no
more: that is the bound. Where t is farther than that from any edge, the kernel and the
plain draw (a float32 running sum, off by less) must pick the same id.
"""
import mlx.core as mx
import numpy as np
import pytest

import kernels.cdf_draw as cd
from engine.core import sampler
from engine.sampling_params import SamplingParams
from kernels.bench.cuda_on_cpu_cdf_draw import cases, miss
from kernels.kernel_set import KernelSet
from kernels.selftest_checks_sampling import check_cdf_draw

CASES = list(cases(np.random.default_rng(0)))       # the CPU shim's rows (its docstring)
IDS = [f"V={kept.shape[1]}" for kept, _ in CASES]


def _clear(kept, u, ids) -> np.ndarray:
    """Rows whose t lies inside `ids`' slices by more than the bound."""
    return miss(kept, u, ids) < -cd.depth(kept.shape[1]) * 2.0 ** -24


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reference_meets_the_definition(case, cpu_stream):
    kept, u = case
    ids = np.array(cd.reference(mx.array(kept), mx.array(u[:, None])))
    assert miss(kept, u, ids).max() <= cd.depth(kept.shape[1]) * 2.0 ** -24


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kernel_meets_the_definition_and_draws_the_plain_ids(backend, case):
    kept, u = case
    ids = np.array(cd.kernel(mx.array(kept), mx.array(u[:, None]), backend=backend))
    assert miss(kept, u, ids).max() <= cd.depth(kept.shape[1]) * 2.0 ** -24
    plain = np.array(cd.reference(mx.array(kept), mx.array(u[:, None])))
    clear = _clear(kept, u, plain)
    np.testing.assert_array_equal(ids[clear], plain[clear])


def test_kernel_draws_many_uniforms_as_the_plain_draw(backend):
    """One app-like row (Qwen3.5's vocabulary), 512 uniforms spread over [0, 1)."""
    kept = np.repeat(CASES[0][0][:1], 512, axis=0)
    u = ((np.arange(512) + 0.5) / 512).astype(np.float32)
    ids = np.array(cd.kernel(mx.array(kept), mx.array(u[:, None]), backend=backend))
    plain = np.array(cd.reference(mx.array(kept), mx.array(u[:, None])))
    assert miss(kept, u, ids).max() <= cd.depth(kept.shape[1]) * 2.0 ** -24
    clear = _clear(kept, u, plain)
    # Not vacuous: a t within the bound of a slice's edge is checked by the definition
    # alone; ids lighter than twice the bound and the others' edges hold `unclear` of the
    # row's mass (6.6 % here), so about that share of evenly spread draws (478 of 512 on
    # the H100, session 34).
    w = kept[0].astype(np.float64) / kept[0].astype(np.float64).sum()
    unclear = np.minimum(w, 2 * cd.depth(kept.shape[1]) * 2.0 ** -24).sum()
    assert clear.sum() >= 512 * (1 - unclear) - 16
    np.testing.assert_array_equal(ids[clear], plain[clear])


def test_kernel_gives_a_row_the_same_id_in_any_batch(backend):
    kept, u = (mx.array(a) for a in (CASES[1][0], CASES[1][1][:, None]))
    whole = np.array(cd.kernel(kept, u, backend=backend)).tolist()
    alone = [np.array(cd.kernel(kept[i:i + 1], u[i:i + 1], backend=backend)).item()
             for i in range(kept.shape[0])]
    assert whole == alone


def test_a_planted_fault_is_caught(cpu_stream):
    """Each draw one id later misses the definition by far more than the bound."""
    kept, u = CASES[2]
    ids = np.array(cd.reference(mx.array(kept), mx.array(u[:, None])))
    wrong = np.minimum(ids + 1, kept.shape[1] - 1)
    assert miss(kept, u, wrong).max() > 100 * cd.depth(kept.shape[1]) * 2.0 ** -24


def test_the_bound_grows_with_the_levels():
    """depth(V): the walk alone up to WALK ids, one level more a 32x longer row."""
    assert cd.depth(cd.WALK) == cd.WALK + 1
    assert cd.depth(cd.WALK) < cd.depth(cd.WALK + 1) < cd.depth(5003) < cd.depth(248_320)
    assert cd.depth(248_320) * 2.0 ** -24 < 3e-5


def test_the_sampler_takes_the_draw_from_the_kernel_set(monkeypatch):
    """Wiring, on any machine: with a kernel set that runs cdf_draw, a sampling row's id
    comes from the kernel (here its reference: the same ids as the plain draw)."""
    calls = []
    monkeypatch.setattr(cd, "kernel", lambda *a, backend: calls.append(backend)
                        or cd.reference(*a))
    logits = mx.array(np.random.default_rng(3).standard_normal((3, 5003)).astype(np.float32) * 3)
    params = [SamplingParams(temperature=0.7, top_p=0.95)] * 3
    keys = mx.random.split(mx.random.key(5), 3)
    plain = np.array(sampler.sample(logits, params, keys=keys, compiled=False))
    off = KernelSet("cuda", (("top_p_cut", "test"),))
    launched = np.array(sampler.sample(logits, params, keys=keys, kernels=off, compiled=False))
    assert calls == ["cuda"]
    np.testing.assert_array_equal(launched, plain)
    none = KernelSet("cuda", (("top_p_cut", "test"), (cd.NAME, "test")))
    sampler.sample(logits, params, keys=keys, kernels=none, compiled=False)
    assert calls == ["cuda"]                           # off: the running sum, no launch


def test_calls_outside_the_contract_decline():
    ks = KernelSet("cuda")
    kept, u = mx.ones((2, 64)), mx.zeros((2, 1))
    assert ks.cdf_draw(kept.astype(mx.float16), u) is None
    assert ks.cdf_draw(kept, u[:1]) is None


def test_the_self_test_check_measures_a_miss(monkeypatch):
    """The start-up self-test's check on the reference passes; one id later fails, and so
    does an id without weight."""
    monkeypatch.setattr(cd, "kernel", lambda *a, backend: cd.reference(*a))
    assert check_cdf_draw("test") <= 1e-5
    monkeypatch.setattr(cd, "kernel", lambda *a, backend: cd.reference(*a) + 1)
    assert check_cdf_draw("test") > 2e-3
    monkeypatch.setattr(cd, "kernel", lambda *a, backend: cd.reference(*a) * 0)
    assert check_cdf_draw("test") == 1.0
