"""Random Gated DeltaNet inputs shared by the step and chunk tests (numpy RNG, then mx)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np


def make(seed, B, T, Hk, Hv, D, S, dtype, lengths=None):
    """Returns (mx args dict, numpy float copies dict). Slots are a shuffled subset of the pool."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, Hk, D)) / np.sqrt(D)
    k = rng.standard_normal((B, T, Hk, D))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)          # the model l2-normalises k
    v = rng.standard_normal((B, T, Hv, D))
    g = rng.uniform(0.5, 1.0, (B, T, Hv))
    beta = rng.uniform(0.0, 1.0, (B, T, Hv))
    pool = (rng.standard_normal((S, Hv, D, D)) * 0.1).astype(np.float32)
    slots = rng.permutation(S)[:B].astype(np.int32)          # not in order
    fresh = np.arange(B) % 3 == 1
    lens = np.full(B, T, np.int32) if lengths is None else np.asarray(lengths, np.int32)
    m = {"q": mx.array(q, dtype=dtype), "k": mx.array(k, dtype=dtype),
         "v": mx.array(v, dtype=dtype), "g": mx.array(g, dtype=mx.float32),
         "beta": mx.array(beta, dtype=mx.float32), "pool": mx.array(pool),
         "slots": mx.array(slots), "fresh": mx.array(fresh), "lengths": mx.array(lens)}
    # numpy sees exactly the values the kernel sees (inputs rounded to dtype first)
    n = {key: np.array(val.astype(mx.float32)) if val.dtype in (mx.bfloat16, mx.float16)
         else np.array(val) for key, val in m.items()}
    n["state0"] = np.where(fresh[:, None, None, None], 0.0, pool[slots])
    return m, n


def tolerances(dtype):
    """(state atol, y atol, y rtol): y is rounded to the input dtype, states stay float32."""
    if dtype == mx.float32:
        return 2e-4, 2e-4, 1e-4
    return 2e-4, 2e-2, 1e-2
