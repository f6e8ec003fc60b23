"""The sampler's filters and draw against an independent numpy float64 reference.

Reference semantics: temperature, then top-k, then top-p over the renormalized
top-k mass (keep a rank while the mass of better ranks is below top_p), then
min-p (p >= min_p * p_max); ranks come from a stable sort, so ties at a cut keep
the lowest ids.
"""
import mlx.core as mx
import numpy as np
import pytest

from engine.core.sampler import filtered_probs, sample
from engine.sampling_params import SamplingParams
from kernels.backend import absent_reason, gpu_backend
from kernels.kernel_set import KernelSet

CHI2_LIMIT = 60.0  # df <= 11: a chance exceedance is p < 1e-8; the seeds are fixed anyway


def reference_probs(row: np.ndarray, p: SamplingParams, check_margin: bool = True,
                    cut_shift: int = 0) -> np.ndarray:
    """float64 distribution for one logits row. `cut_shift` plants an off-by-one in the
    top-p cut (for the test that the checks catch one)."""
    s = row.astype(np.float64) / p.temperature
    order = np.argsort(-s, kind="stable")                          # best first, ties by id
    probs = np.exp(s[order] - s.max())
    probs /= probs.sum()
    keep = np.arange(len(s)) < (p.top_k if p.top_k > 0 else len(s))
    top = np.where(keep, probs, 0.0)
    top /= top.sum()
    if p.top_p < 1.0:
        before = np.cumsum(top) - top
        if check_margin:  # the case must not sit within float32 rounding of its cut
            assert np.min(np.abs(before[keep] - p.top_p)) > 1e-5
        count = int(np.sum(keep & (before < p.top_p))) + cut_shift
        keep &= np.arange(len(s)) < count
    keep &= probs >= p.min_p * probs[0]
    out = np.zeros(len(s))
    out[order] = np.where(keep, probs, 0.0)
    return out / out.sum()


def _tied_logits(rows: int, vocab: int, seed: int) -> np.ndarray:
    # A coarse grid: many exact ties, no near-ties (steps of 0.25 stay exact in float32).
    return np.round(np.random.default_rng(seed).normal(size=(rows, vocab)) * 8) / 4


def _random_params(rng) -> SamplingParams:
    return SamplingParams(temperature=float(rng.choice([0.5, 0.7, 1.0, 1.6])),
                          top_k=int(rng.choice([0, 0, 1, 3, 17, 60])),
                          top_p=float(rng.choice([1.0, 0.3, 0.61, 0.95, 0.999])),
                          min_p=float(rng.choice([0.0, 0.0, 0.02, 0.3])))


def _well_posed(row, p):
    try:
        reference_probs(row, p)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("vocab", [50, 300])
def test_kept_set_and_probabilities_match_the_reference(vocab):
    rng = np.random.default_rng(vocab)
    logits = _tied_logits(64, vocab, seed=vocab)
    params = [_random_params(rng) for _ in range(64)]
    cases = [i for i in range(64) if _well_posed(logits[i], params[i])]
    assert len(cases) > 40
    got = np.array(filtered_probs(mx.array(logits[cases].astype(np.float32)),
                                  [params[i] for i in cases]))
    for j, i in enumerate(cases):
        want = reference_probs(logits[i], params[i])
        assert np.array_equal(got[j] > 0, want > 0), (i, params[i])
        assert np.allclose(got[j], want, atol=2e-6), (i, params[i])


@pytest.mark.parametrize("top_p, kept", [(0.5, 16), (0.25, 8), (0.26, 9), (1 / 32, 1),
                                         (0.999, 32)])
def test_uniform_logits_keep_the_lowest_ids_at_a_tie(top_p, kept):
    logits = mx.zeros((2, 32))
    params = [SamplingParams(temperature=1.0, top_p=top_p),
              SamplingParams(temperature=1.0, top_p=top_p, top_k=20)]
    got = np.array(filtered_probs(logits, params))
    assert np.array_equal(np.flatnonzero(got[0]), np.arange(kept))
    with_k = min(20, int(np.ceil(top_p * 20 - 1e-9)))  # top-p over the top-20 mass
    assert np.array_equal(np.flatnonzero(got[1]), np.arange(with_k))


def test_ties_at_the_top_k_cut_keep_the_lowest_ids():
    logits = mx.array([[1.0, 3.0, 2.0, 2.0, 0.0, 2.0]])
    got = np.array(filtered_probs(logits, [SamplingParams(temperature=1.0, top_k=3)]))
    assert np.array_equal(np.flatnonzero(got[0]), [1, 2, 3])


def test_huge_vocab_top_p_matches_the_reference_to_float32_rounding():
    # The bisection's range and step count at a real vocabulary size, far-off logits included.
    # Ids near a 248k-vocabulary cut hold ~1e-6 each, as fine as float32 sums resolve, so
    # ids may differ only where the reference's mass before them is within 1e-5 of top_p.
    rng = np.random.default_rng(7)
    logits = (rng.normal(size=(3, 248320)) * 3).astype(np.float32)
    logits[1, :1000] = -1e30
    params = [SamplingParams(temperature=0.7, top_p=0.95), SamplingParams(top_p=0.9,
              temperature=1.0), SamplingParams(temperature=2.0, top_p=0.999)]
    got = np.array(filtered_probs(mx.array(logits), params))
    for row, p, g in zip(logits, params, got):
        want = reference_probs(row, p, check_margin=False)
        probs = reference_probs(row, SamplingParams(temperature=p.temperature))
        before = _mass_before(probs)
        differ = (g > 0) != (want > 0)
        assert np.all(np.abs(before[differ] - p.top_p) < 1e-5)
        assert 0.5 * np.abs(g - want).sum() < 2e-5  # total variation distance


def _mass_before(probs):
    """Mass of the ids ranked before each id (stable order), in float64."""
    order = np.argsort(-probs, kind="stable")
    out = np.empty_like(probs)
    out[order] = np.cumsum(probs[order]) - probs[order]
    return out


# A mixed batch: each row's settings differ; draws are compared with the reference.
CASES = [
    (SamplingParams(temperature=1.0), [2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2]),
    (SamplingParams(temperature=0.7, top_p=0.8), [2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2]),
    (SamplingParams(temperature=1.0, top_k=5), [0.3, 1.0, 0.5, 0.0, -0.5, 2.0, 1.5, 0.2]),
    (SamplingParams(temperature=1.2, top_k=6, top_p=0.7),
     [0.3, 1.0, 0.5, 0.0, -0.5, 2.0, 1.5, 0.2]),
    (SamplingParams(temperature=1.0, min_p=0.1), [1.0, 0.0, -1.0, -2.0, -3.0, 0.5, -2.5, 0.8]),
    (SamplingParams(temperature=1.3, top_p=0.9, min_p=0.05),
     [1.0, 0.0, -1.0, -2.0, -3.0, 0.5, -2.5, 0.8]),
    (SamplingParams(temperature=1.0, top_p=0.5), [0.0] * 8),            # a tie at the cut
    (SamplingParams(temperature=1.0, top_p=0.6), [1.0, 0.5, 0.5, 0.5, 0.5, 0.0, -1.0, 0.5]),
]
DRAWS = 20000


def _gpu_kernels() -> KernelSet:
    """Every kernel a GPU's set may launch (the sampler's: top_p_cut, cdf_draw), or a skip."""
    backend = gpu_backend()
    if backend is None:
        pytest.skip(f"the sampler's kernels: {absent_reason()}")
    return KernelSet(backend)


@pytest.fixture(scope="module", params=["plain", "compiled", "kernels"])
def drawn(request):
    """The draws of the plain graph, of its compiled form (what a GPU runs) and of that
    with the GPU's kernels (a GPU only)."""
    kernels = _gpu_kernels() if request.param == "kernels" else None
    logits = np.array([row for _, row in CASES] * DRAWS, np.float32)    # [8 * N, 8]
    params = [p for p, _ in CASES] * DRAWS
    keys = mx.random.split(mx.random.key(2024), len(params))
    ids = np.array(sample(mx.array(logits), params, keys=keys, kernels=kernels,
                          compiled=request.param != "plain")).reshape(DRAWS, len(CASES))
    return [np.bincount(ids[:, c], minlength=8) for c in range(len(CASES))]


def _fits(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Only reference-kept ids drawn, and a chi-square statistic under CHI2_LIMIT."""
    if np.any(counts[probs == 0] > 0):
        return False
    expected = probs[probs > 0] * counts.sum()
    assert expected.min() > 50  # the statistic's chi-square approximation holds
    return float(np.sum((counts[probs > 0] - expected) ** 2 / expected)) < CHI2_LIMIT


@pytest.mark.parametrize("case", range(len(CASES)))
def test_draws_follow_the_reference_distribution(drawn, case):
    params, row = CASES[case]
    assert _fits(drawn[case], reference_probs(np.array(row), params, check_margin=False))


@pytest.mark.parametrize("case", [1, 3, 5, 6, 7])
@pytest.mark.parametrize("shift", [-1, 1])
def test_the_check_catches_an_off_by_one_top_p_cut(drawn, case, shift):
    params, row = CASES[case]
    planted = reference_probs(np.array(row), params, check_margin=False, cut_shift=shift)
    assert not _fits(drawn[case], planted)


@pytest.mark.parametrize("uniform, expected", [(0.0, 1), (1.0 - 2 ** -24, 5), (1.0, 5)])
def test_the_draw_never_lands_on_a_dropped_id(monkeypatch, uniform, expected):
    # Ids 1, 2, 5 survive top-k 3; a uniform at either end of [0, 1] still lands on them.
    from engine.core import sampler
    monkeypatch.setattr(sampler, "_uniform_rows", lambda keys: mx.full((1,), uniform))
    logits = mx.array([[-5.0, 3.0, 2.0, -4.0, -3.0, 2.5, -6.0]])
    keys = mx.random.split(mx.random.key(0), 1)
    # plain: a compiled trace would keep the first patched uniform for the later ones
    assert int(sample(logits, [SamplingParams(temperature=1.0, top_k=3)], keys=keys,
                      compiled=False)[0]) == expected


QWEN3_5_VOCAB = 248_320


@pytest.mark.parametrize("path", ["plain", "compiled", "kernels"])
@pytest.mark.parametrize("rows", [1, 2, 8, 32])
def test_the_apps_default_sampling_matches_the_reference(rows, path):
    """A new chat's settings (temperature 0.7, top-p 0.95) on Qwen3.5's vocabulary, at the
    decode batch sizes the engine runs: the kept set and weights match the float64
    reference up to ids within float32 rounding of the cut, and every draw is kept."""
    from engine.settings_spec import chat_defaults
    p = SamplingParams.from_settings(chat_defaults())
    assert p.top_p < 1.0 and p.top_k == 0 and not p.greedy   # the top-p-alone path
    logits = (np.random.default_rng(rows).standard_normal((rows, QWEN3_5_VOCAB)) * 3
              ).astype(np.float32)
    kernels = _gpu_kernels() if path == "kernels" else None
    got = np.array(filtered_probs(mx.array(logits), [p] * rows, kernels))
    keys = mx.random.split(mx.random.key(rows), rows)
    ids = np.array(sample(mx.array(logits), [p] * rows, keys=keys, kernels=kernels,
                          compiled=path != "plain"))
    for row, g, i in zip(logits, got, ids):
        want = reference_probs(row, p, check_margin=False)
        before = _mass_before(reference_probs(row, SamplingParams(temperature=p.temperature)))
        differ = (g > 0) != (want > 0)
        assert np.all(np.abs(before[differ] - p.top_p) < 1e-5)
        assert 0.5 * np.abs(g - want).sum() < 2e-5
        assert g[i] > 0 and (want[i] > 0 or differ[i])


def test_more_rows_than_one_sort_launch_holds_sort_in_slices(monkeypatch):
    # MLX's CUDA sort takes at most 65,535 rows a launch; slicing must not change a row.
    from engine.core import sampling_keep
    logits = mx.array(_tied_logits(10, 40, seed=5).astype(np.float32))
    params = [SamplingParams(temperature=1.0, top_k=k, top_p=0.9)
              for k in (3, 0, 5, 0, 0, 0, 7, 1, 0, 2)]
    whole = np.array(filtered_probs(logits, params))
    monkeypatch.setattr(sampling_keep, "_MAX_SORT_ROWS", 3)
    np.testing.assert_array_equal(np.array(filtered_probs(logits, params)), whole)
