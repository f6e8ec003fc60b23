"""swiglu (engine/models/elementwise.py) against a float64 reference, on the backend the
tests run on (the CPU computes it through pow instead of sigmoid: a different rounding).

Tolerance: silu(g) * u is a handful of float32 operations, each within half an ulp
(6e-8 relative), and pow's own error is under 1 ulp: 1e-6 relative to |silu(g) * u|
(plus a float32 denormal floor) holds with room, while a wrong sign or formula is off
by O(1)."""
import mlx.core as mx
import numpy as np

from engine.models.elementwise import swiglu


def _reference(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    g, u = g.astype(np.float64), u.astype(np.float64)
    return g / (1.0 + np.exp(-g)) * u


def test_swiglu_matches_float64_over_the_range_of_activations():
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((8, 1, 1536)) * 6).astype(np.float32)      # [B, T, I]
    g[0, 0, :8] = [-100.0, -88.0, -30.0, -1e-6, 0.0, 1e-6, 30.0, 100.0]   # tails and 0
    u = rng.standard_normal((8, 1, 1536)).astype(np.float32)
    got = np.array(swiglu(mx.array(g), mx.array(u)), np.float64)
    want = _reference(g, u)
    assert np.all(np.isfinite(got))
    assert np.all(np.abs(got - want) <= 1e-6 * np.abs(want) + 1e-30)


def test_swiglu_of_strided_halves_matches_float64():
    """As the MLP calls it: gate and up are the two halves of one joined projection."""
    rng = np.random.default_rng(1)
    gu = (rng.standard_normal((4, 3, 64)) * 4).astype(np.float32)       # [B, T, 2I]
    gate, up = mx.split(mx.array(gu), [32], axis=-1)
    got = np.array(swiglu(gate, up), np.float64)
    want = _reference(gu[..., :32], gu[..., 32:])
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
