"""How far two float32 runs of the same model may differ when only their rounding differs.

Equivalence tests run the same tiny float32 model two ways (a row alone and in a batch,
a prompt in one shot and in chunks, padded and unpadded, compiled and plain, ours and
mlx-lm's) and compare logits, activations or cache entries. The two ways sum the same
products in different orders: MKL's float32 GEMMs block the reduction by the matrix's
shape and by the CPU's vector unit (AVX2 on one machine, AVX-512 on another), a chunked
recurrence associates its token loop differently from a one-shot one. The tolerance is
what that reordering can produce, stated once here and derived, not tuned per test.

Derivation. One float32 operation rounds its result by at most u = eps32 / 2 relative,
eps32 = 2**-23. A reduction of n terms rounds n times, each error relative to the
running sum; roundings of unrelated orders are independent with mean ~0, so the error
of a sum is a random walk: its standard deviation is about u * sqrt(n / 3) * |partial
sums| (Higham's worst case, n * u, needs every rounding to go the same way; it is never
met and would make the test blind). A network chains its reductions: a logit has passed,
per layer, the RMSNorm's sum of squares and the projections that read the hidden state
(hidden_size each, ~3 of them), the mixer's sums over its tokens (attention's softmax-
weighted values, the recurrence's state carried token to token), and the MLP's down
projection (intermediate_size); then the head (hidden_size). Every layer starts from a
normalised input, so its rounding errors are relative to the activations' scale and
carry forward with a gain near 1: errors of all layers add as one walk of
``depth = num_layers * (3 * hidden + intermediate + tokens) + hidden`` roundings.
Two runs differ by the difference of two such walks (sqrt(2) times one), and the
partial sums of a logit are bounded by the logits' own scale, max |reference|:

    atol = K * eps32 * sqrt(depth) * max|reference|

K counts standard deviations: the compared arrays hold up to ~1e5 elements, whose
largest Gaussian deviate is ~4.5 sigma, and sigma is u * sqrt(2/3) ~ 0.41 eps32 per
sqrt(rounding) (uniform rounding errors, two walks) at the scale above, so rounding
alone reaches ~1.8 eps32 * sqrt(depth) * scale; the gain of a layer of these random
tiny models is not exactly 1 (SiLU, softmax and the gated recurrence stretch some
directions), and K = 16 leaves the whole depth a gain of ~9. The largest seen was 2.4
(4.5 eps32 * sqrt(depth) * scale, below).

Where the walk is not enough: conditioning. A value that comes out of a cancellation
and is then normalised carries the rounding of its partial sums, not of itself; the
bound above cannot see that, so ``rounding_spread`` measures it at the very input
(backward error analysis; its docstring) and the tolerance of each row becomes the
larger of the walk bound and K_SPREAD times the measured spread. K_SPREAD = 4: the
spread is the largest of two samples of one rounding's effect, and the two compared
runs are two roundings (sqrt(2)), with the samples' own scatter (measured: a single
seed's spread varied 20x between seeds at one spiked token, two seeds' maximum 3x).

Measured on a 2-core AMD EPYC (MKL 2026.2 in its strict reproducible mode and in its
default mode, and MLX's own reference BLAS; ``TANDEM_TOLERANCE_LOG``): over every
comparison of the tests that use this file, the largest difference was 0.28 of its
tolerance (a mixed forward against the two forwards it replaces) where the walk bound
decides, 0.21 where the spread decides; the one comparison the walk alone would fail,
the Qwen3-Next chunked prefill above, was 7.5x the walk bound and 0.08 of its spread
bound. A real error is far outside: 1e-2 on one logit is 13x the tolerance, a prompt
read one position off ~1e4x (``tests/test_float32_tolerance.py``).

What stays exact: greedy tokens (an argmax differs only where two logits are within the
tolerance, which these random models never produce), and cache regions a step must not
write (compared bit for bit, never with this tolerance).
"""
from __future__ import annotations

import math
import os

import numpy as np

LOG_VAR = "TANDEM_TOLERANCE_LOG"

EPS32 = float(np.finfo(np.float32).eps)   # 2**-23
K = 16.0                                  # standard deviations of the rounding walk
K_SPREAD = 4.0                            # the measured spread's sampling noise (below)
U32 = EPS32 / 2                           # unit roundoff of round-to-nearest


def model_depth(model, tokens: int) -> int:
    """Roundings on a logit's longest path through ``model`` (a model or its ModelArgs)
    after ``tokens`` tokens."""
    a = getattr(model, "args", model)
    inner = getattr(a, "intermediate_size", 0) or 0
    moe = (getattr(a, "moe_intermediate_size", 0) or 0) + (
        getattr(a, "shared_expert_intermediate_size", 0) or 0)
    per_layer = 3 * a.hidden_size + max(inner, moe) + tokens
    return a.num_hidden_layers * per_layer + a.hidden_size


def tolerance(reference, depth: int) -> float:
    """The largest |got - reference| that float32 reordering over ``depth`` roundings
    explains at a well-conditioned point, at the reference's own scale."""
    ref = _np(reference)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return K * EPS32 * math.sqrt(depth) * scale


def rounding_spread(model, run, seeds=(0, 1)) -> np.ndarray:
    """How far one float32 rounding can move ``run()``'s output at this very input.

    Backward error analysis: a float32 dot product of n terms returns the exact dot
    product of inputs each moved by about u * sqrt(n) (relative, random sign). Moving
    every float weight of ``model`` that much and running again shows how the model at
    this input amplifies such an error; the bound above cannot see that. It matters
    where a value comes out of a cancellation and is then normalised: a Gated DeltaNet
    head whose output nearly cancels (rms 7e-5 against a usual 2e-2) goes through its
    gated RMSNorm, which divides by that rms, so one ulp of difference upstream
    becomes ~1e-3 in the logits (the tiny Qwen3-Next at token 6 of the chunked-prefill
    prompt, every BLAS and CPU mode measured). The weights are restored bit for bit.
    Returns max over ``seeds`` of |moved - run()|, shaped like run()'s output.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    saved = tree_flatten(model.parameters())
    base, out = _np(run()), None
    try:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            moved = [(k, v * (1 + U32 * math.sqrt(v.shape[-1]) * mx.array(
                rng.standard_normal(v.shape).astype(np.float32)).astype(v.dtype)))
                for k, v in saved if mx.issubdtype(v.dtype, mx.floating) and v.ndim]
            model.load_weights(moved, strict=False)
            d = np.abs(_np(run()) - base)
            out = d if out is None else np.maximum(out, d)
    finally:
        model.load_weights(saved, strict=False)
    return out


def _row_tolerance(want: np.ndarray, depth: int, spread) -> np.ndarray:
    """Per row (last axis): the walk's bound, or K_SPREAD x the measured spread if larger."""
    tol = np.full(want.shape[:-1] + (1,), tolerance(want, depth))
    if spread is not None:
        spread = np.broadcast_to(_np(spread), want.shape)
        tol = np.maximum(tol, K_SPREAD * spread.max(axis=-1, keepdims=True))
    return tol


def excess(got, want, depth: int, spread=None) -> float:
    """max |got - want| / tolerance over rows: <= 1 is rounding, > 1 a real difference."""
    got, want = _np(got), _np(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if not got.size:
        return 0.0
    want2, got2 = _rows(want), _rows(got)
    tol = _row_tolerance(want2, depth, None if spread is None else _rows(_np(spread)))
    diff = np.abs(got2 - want2).max(axis=-1, keepdims=True)
    ratio = np.where(tol > 0, diff / np.where(tol > 0, tol, 1), np.where(diff > 0, np.inf, 0))
    _log(float(ratio.max()), spread is not None)
    return float(ratio.max())


def is_close(got, want, depth: int, spread=None) -> bool:
    return excess(got, want, depth, spread) <= 1.0


def assert_close(got, want, depth: int, what: str = "", spread=None) -> None:
    """got equals want up to float32 reordering over ``depth`` roundings (and, with
    ``spread`` from rounding_spread, up to what this input's conditioning amplifies)."""
    got_np, want_np = _np(got), _np(want)
    ratio = excess(got_np, want_np, depth, spread)
    assert ratio <= 1.0, (
        f"{what}: max |got - want| = {float(np.max(np.abs(got_np - want_np))):.3g} is "
        f"{ratio:.2f}x the float32 tolerance (walk bound {tolerance(want_np, depth):.3g}, "
        f"depth {depth}, scale {float(np.max(np.abs(want_np))):.3g}"
        f"{'' if spread is None else f', measured spread up to {float(np.max(spread)):.3g}'})")


def _log(ratio: float, measured: bool) -> None:
    """TANDEM_TOLERANCE_LOG=file: append each comparison's share of its tolerance, to
    re-derive K on a new machine (the numbers in the docstring came from this)."""
    path = os.environ.get(LOG_VAR)
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(path, "a") as f:
            f.write(f"{test} {ratio:.4f} {'spread' if measured else 'walk'}\n")


def _rows(x: np.ndarray) -> np.ndarray:
    """[rows, last axis]: a logits row, a head's vector, a cache entry's head_dim."""
    return x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)


def _np(x) -> np.ndarray:
    """numpy float64 of an mx.array (any float dtype) or array-like."""
    if type(x).__module__.startswith("mlx"):
        import mlx.core as mx
        x = x.astype(mx.float32)
    return np.asarray(x, dtype=np.float64)
