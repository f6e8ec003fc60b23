"""The one place that decides, call by call, whether a custom kernel runs.

A loaded model holds its own `KernelSet`, made at load from the self-test
(`kernels.selftest.select_kernels`): the backend kernels launch on and the
kernels that must not launch, with why. Two engines in one process each keep
theirs; nothing here is process-wide or changes after load.

Each dispatch method answers for one call: the kernel's result when that kernel
is on AND the call's shapes are inside its contract (the module's `applies`),
else None. On None the caller runs its own plain-mx path: the model's
constant-graph code, never the kernels' float32 references (a per-token loop
for the chunked recurrence), which exist for the tests and the self-test.
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

import kernels.add_norm_qmv as anq
import kernels.add_rms_norm as arn
import kernels.attention_prep as ap
import kernels.cdf_draw as cd
import kernels.gated_delta_chunk as gdc
import kernels.gated_delta_step as gds
import kernels.gated_delta_step_norm as gdsn
import kernels.gated_rms_norm as grn
import kernels.gdn_conv_chunk as gcc
import kernels.gdn_conv_step as gcs
import kernels.moe_block as mb
import kernels.moe_experts as me
import kernels.moe_grouped as mg
import kernels.moe_route as mr
import kernels.paged_attention as pa
import kernels.qmm_rows as qr
import kernels.qmv_normed as qn
import kernels.swiglu_joined as sj
import kernels.top_p_cut as tpc
from kernels.backend import CUDA_ONLY, NAMES
from kernels.pool_order import after_write
from kernels.stand_in import COUNT

# COUNT: stand-in launches that build the GPU graph anywhere, for counting (kernels/stand_in.py).
BACKENDS = ("cuda", "metal", COUNT)


@dataclass(frozen=True)
class KernelSet:
    """backend: where kernels launch ('cuda' | 'metal' | 'count': stand-ins), None: nowhere;
    off: (kernel name, why) for each kernel that must not launch."""
    backend: str | None = None
    off: tuple[tuple[str, str], ...] = ()
    grouped_from: int | None = None     # moe_grouped's pairs from, measured at load (None: off)
    experts_to: int | None = None       # moe_experts' pairs up to, measured at load (None:
                                        # its MAX_PAIRS; kernels/moe_grouped_tune.py)

    def __post_init__(self):
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS} or None, not {self.backend!r}")
        unknown = [name for name, _ in self.off if name not in NAMES]
        if unknown:
            raise ValueError(f"unknown kernel {unknown[0]!r}; known: {', '.join(NAMES)}")

    @classmethod
    def plain(cls, reason: str) -> KernelSet:
        """No kernel launches; every call takes the model's plain-mx path."""
        return cls(None, tuple((name, reason) for name in NAMES))

    def launches(self, name: str) -> str | None:
        """The backend `name` launches on, or None when it is off."""
        if self.backend is None or any(n == name for n, _ in self.off):
            return None
        if self.backend == "metal" and name in CUDA_ONLY:
            return None
        return self.backend

    def status(self) -> dict[str, str]:
        """name -> 'cuda' | 'metal' | 'reference (<why>)', for the status panel."""
        why = {**(CUDA_ONLY if self.backend == "metal" else {}), **dict(self.off)}
        status = {name: self.launches(name) or f"reference ({why.get(name, 'no GPU backend')})"
                  for name in NAMES}
        if self.launches(mg.NAME) and mg.MIN_PAIRS is None and self.grouped_from is None:
            status[mg.NAME] = "reference (not faster than MLX's own path where measured)"
        return status

    # -- dispatch: the kernel's result, or None (the caller runs its plain-mx path) ----
    def gated_delta_step(self, q, k, v, g, beta, pool, slots, fresh=None, decay=None):
        """(y [B, Hv, Dv], pool) of kernels.gated_delta_step; pool rows updated in place.
        decay = (A_log, dt_bias): g and beta are the raw projections a and b, turned into
        the decay and beta inside the kernel."""
        backend = self.launches(gds.NAME)
        lanes = gds.pick_lanes(q.shape[-1], v.shape[-1])
        if backend is None or not gds.applies(q, k, v, pool, lanes):
            return None
        y = gds.kernel(q, k, v, g, beta, pool, slots, fresh, backend=backend, lanes=lanes,
                       decay=decay)
        return y, after_write([pool], [y])[0]    # the returned pool: ordered after the write

    def gated_delta_step_norm(self, q, k, v, g, beta, pool, slots, z, weight, eps: float,
                              fresh=None, decay=None, joined: bool = False, columns=None):
        """(out [B, Hv, Dv], pool) of kernels.gated_delta_step_norm: the step (as
        gated_delta_step, the same arguments) and Gated DeltaNet's output norm,
        rms_norm(y) * weight * silu(z) per head with z [B, Hv*Dv] or [B, Hv, Dv] (any
        strides), in one
        launch; pool rows updated in place. joined: out [B, Hv*Dv] (no Reshape node).
        columns (z's, beta's, g's): z, beta and g are the joined input projection, read
        from those columns (no Split node). None: the caller runs the step and the norm."""
        backend = self.launches(gdsn.NAME)
        if backend is None or not gdsn.applies(q, k, v, pool, z, weight, columns):
            return None
        out = gdsn.kernel(q, k, v, g, beta, pool, slots, z, weight, eps, fresh,
                          backend=backend, decay=decay, joined=joined, columns=columns)
        return out, after_write([pool], [out])[0]  # the returned pool: ordered after the write

    def gated_delta_chunk(self, q, k, v, g, beta, pool, slots, lengths=None, fresh=None,
                          decay=None):
        """(y [B, T, Hv, Dv], pool) of kernels.gated_delta_chunk; pool rows updated in place.
        decay = (A_log, dt_bias): g and beta are the raw a and b, as gated_delta_step's."""
        backend = self.launches(gdc.NAME)
        lanes = gdc.default_lanes(q.shape[0], v.shape[2], q.shape[3], v.shape[3])
        if backend is None or not gdc.applies(q, k, v, pool, lanes):
            return None
        y = gdc.kernel(q, k, v, g, beta, pool, slots, lengths, fresh, backend=backend,
                       lanes=lanes, decay=decay)
        return y, mx.depends(pool, y)

    def paged_decode_attention(self, q, k_pool, v_pool, block_tables, context_lens,
                               page_size: int, scale: float, gate=None, joined: bool = False):
        """out [B, Hq, D] of kernels.paged_attention (one new token per row); times
        sigmoid(gate) when given (the gated attention's output gate: [B, Hq, D], or the
        joined q+gate projection [B, Hq*2D], each head's q then its gate). joined: out
        [B, Hq*D], the heads joined (no Reshape node after the launch)."""
        backend = self.launches(pa.NAME)
        if backend is None or not pa.applies(q, k_pool, v_pool, gate):
            return None
        return pa.kernel(q, k_pool, v_pool, block_tables, context_lens, page_size, scale,
                         backend=backend, gate=gate, joined=joined)

    def moe_route(self, logits, k: int, normalize: bool = True):
        """(indices [N, k] int32, weights [N, k] float32) of kernels.moe_route."""
        backend = self.launches(mr.NAME)
        if backend is None or not mr.applies(logits, k):
            return None
        return mr.kernel(logits, k, normalize, backend=backend)

    def gdn_conv_step(self, qkv, weight, pool, slots, fresh, heads, eps: float):
        """((q, k, v), pool) of kernels.gdn_conv_step: the decode conv, its state written
        into pool[slots] in place, q/k normalised; heads (Hk, Hv, Dk, Dv)."""
        backend = self.launches(gcs.NAME)
        if backend is None or not gcs.applies(qkv, weight, pool, heads):
            return None
        out = gcs.kernel(qkv, weight, pool, slots, fresh, heads, eps, backend=backend)
        return out, after_write([pool], out)[0]  # the returned pool: ordered after the write

    def gdn_conv_chunk(self, qkv, weight, pool, slots, fresh, lengths, heads, eps: float):
        """((q, k, v), pool) of kernels.gdn_conv_chunk: a prompt chunk's conv, its state
        written into pool[slots] in place at each row's length, q/k normalised; heads
        (Hk, Hv, Dk, Dv); lengths None: every row has all T tokens."""
        backend = self.launches(gcc.NAME)
        if backend is None or not gcc.applies(qkv, weight, pool, heads):
            return None
        out = gcc.kernel(qkv, weight, pool, slots, fresh, lengths, heads, eps, backend=backend)
        return out, mx.depends(pool, out)   # keep the returned pool: ordered after the write

    def moe_experts(self, x, idx, scores, experts, shared_gate=None, residual=None):
        """y [N, D] of kernels.moe_experts: the routed experts' weighted sum (x [N, D],
        idx [N, k], scores [N, k]; experts a kernels.moe_experts.QuantExperts), with its
        shared expert gated by sigmoid(shared_gate [N, 1]) and residual [N, D] when given.
        Up to MAX_PAIRS (token, expert) pairs, or the more measured faster at load."""
        backend = self.launches(me.NAME)
        if backend is None or not me.applies(x, idx, experts, shared_gate, residual,
                                             self.experts_max_pairs()):
            return None
        return me.kernel(x, idx, scores, experts, shared_gate, residual, backend=backend)

    def experts_max_pairs(self) -> int:
        """The pairs up to which moe_experts runs: MAX_PAIRS, or further where measured."""
        if not me.MEASURED_RANGE or self.experts_to is None:
            return me.MAX_PAIRS
        return max(me.MAX_PAIRS, self.experts_to)

    def moe_grouped(self, x, idx, scores, experts):
        """y [N, D] of kernels.moe_grouped: the routed experts' weighted sum (as moe_experts
        without the shared expert and residual) for a prompt chunk's many pairs, grouped by
        expert. CUDA only; from moe_grouped.MIN_PAIRS pairs where a bench sets it, else
        from `grouped_from` (kernels/moe_grouped_tune.py: where it measured faster)."""
        backend = self.launches(mg.NAME)
        least = mg.MIN_PAIRS if mg.MIN_PAIRS is not None else self.grouped_from
        if backend is None or least is None or not mg.applies(x, idx, experts, least):
            return None
        return mg.kernel(x, idx, scores, experts, backend=backend)

    def moe_block(self, x, logits, k: int, normalize: bool, experts, shared_gate=None,
                  residual=None, route_rows=None, shared_gate_col: int = 0):
        """y [N, D] of kernels.moe_block: moe_route's top-k of the router logits [N, E]
        (any strides; the first E columns of a wider array; row route_rows[n] for token n
        when given: padding rows) inside moe_experts' two launches, with its shared expert
        and residual as moe_experts (the gate column shared_gate_col of shared_gate: the
        router's joined output can be both, unsplit)."""
        backend = self.launches(mb.NAME)
        if backend is None or not mb.applies(x, logits, k, experts, shared_gate, residual,
                                             route_rows, shared_gate_col):
            return None
        return mb.kernel(x, logits, k, normalize, experts, shared_gate, residual, route_rows,
                         backend=backend, shared_gate_col=shared_gate_col)

    def add_rms_norm(self, x, r, weight, eps: float):
        """(h = x + r, rms_norm(h) * weight) of kernels.add_rms_norm: x, r [N, D]."""
        backend = self.launches(arn.NAME)
        if backend is None or not arn.applies(x, r, weight):
            return None
        return tuple(arn.kernel(x, r, weight, eps, backend=backend))

    def swiglu_joined(self, a, up_col: int, width: int):
        """y [N, width] of kernels.swiglu_joined: silu(gate) * up read from the joined gate_up
        output a [N, W] (gate at column 0, up at up_col), unsplit."""
        backend = self.launches(sj.NAME)
        if backend is None or not sj.applies(a, up_col, width):
            return None
        return sj.kernel(a, up_col, width, backend=backend)

    def attention_prep(self, q, k, v, q_norm, k_norm, eps: float, offsets, slots, k_pool,
                       v_pool, heads, rotary_dim: int, base: float, kv_columns=None):
        """(q [B, Hq, D], (k_pool, v_pool)) of kernels.attention_prep: decode's q/k norms and
        rotary, the new K/V written into the pools at slots in place. q [B, Hq*QH],
        k, v [B, Hkv*D], or with kv_columns (k's, v's) the joined projection q is the start
        of (no Split node); heads (Hq, Hkv, D, QH); q_norm = k_norm = None: no norms."""
        backend = self.prep_launches(q, k, v, q_norm, k_norm, k_pool, v_pool, heads, rotary_dim,
                                     kv_columns)
        if backend is None:
            return None
        out = ap.kernel(q, k, v, q_norm, k_norm, eps, offsets, slots, k_pool, v_pool, heads,
                        rotary_dim, base, backend=backend, kv_columns=kv_columns)
        # keep the returned pools (MLX schedules their users after the write; on the GPU
        # the paged kernel's q orders its reads: prep_launches)
        return out, tuple(after_write([k_pool, v_pool], [out]))

    def prep_launches(self, q, k, v, q_norm, k_norm, k_pool, v_pool, heads,
                      rotary_dim: int, kv_columns=None) -> str | None:
        """The backend attention_prep launches on for this call, or None. Besides its own
        contract, the paged kernel must read the pools it writes: they are written in
        place, and MLX's GPU backends order work by declared outputs only, so the one
        reader they may have in the step is the paged kernel, which takes the prep's q
        (an edge). The plain attention's gather of the pools would have none and could
        read them before the write: on the H200 a tiny model (head dim 16: no paged
        kernel) chose tokens up to 0.48 of a logit off greedy, right with
        MLX_USE_CUDA_GRAPHS=0 or without this kernel (kernels/README.md, "Ordering on a
        GPU")."""
        backend = self.launches(ap.NAME)
        if backend is None or not ap.applies(q, k, v, q_norm, k_norm, k_pool, v_pool, heads,
                                             rotary_dim, kv_columns):
            return None
        Hq, _, D, _ = heads
        q_shape = (q.shape[0], Hq, D)
        if self.launches(pa.NAME) is None or not pa.applies_to(q_shape, k_pool, v_pool, q_shape):
            return None
        return backend

    def gated_rms_norm(self, y, z, weight, eps: float):
        """rms_norm(y) * weight * silu(z) per head row of kernels.gated_rms_norm:
        y, z [B, T, H, D]."""
        backend = self.launches(grn.NAME)
        if backend is None or not grn.applies(y, z, weight):
            return None
        return grn.kernel(y, z, weight, eps, backend=backend)

    def top_p_cut(self, key, weights, target):
        """[B, 2] int32 of kernels.top_p_cut: top-p's cut key over each row (key, weights
        [B, V], target [B, 1]), as the sampler's bisection finds it, and the index of the
        last id at the cut's key that top-p keeps (ties kept in id order)."""
        backend = self.launches(tpc.NAME)
        if backend is None or not tpc.applies(key, weights, target):
            return None
        return tpc.kernel(key, weights, target, backend=backend)

    def cdf_draw(self, kept, u):
        """[B] int32 of kernels.cdf_draw: each row's id by inverse CDF (kept [B, V] weights,
        0 = dropped; u [B, 1] uniform), as the sampler's running-sum draw picks it."""
        backend = self.launches(cd.NAME)
        if backend is None or not cd.applies(kept, u):
            return None
        return cd.kernel(kept, u, backend=backend)

    def qmv_normed(self, x, norm_weight, eps: float, w, scales, biases, group_size: int,
                   bits: int):
        """y [1, N] of kernels.qmv_normed: one row's rms_norm(x) * norm_weight times a 4- or
        8-bit affine quantized weight [N, K * bits / 32] (transposed), in one launch."""
        backend = self.launches(qn.NAME)
        if backend is None or not qn.applies(x, norm_weight, w, scales, biases, group_size,
                                             bits):
            return None
        return qn.kernel(x, norm_weight, eps, w, scales, biases, group_size, bits,
                         backend=backend)

    def add_norm_qmv(self, x, r, norm_weight, eps: float, w, scales, biases,
                     group_size: int, bits: int):
        """(h, hn, y) of kernels.add_norm_qmv: one row's h = x + r, hn = rms_norm(h) *
        norm_weight and hn times a 4- or 8-bit affine quantized weight (transposed), in
        one launch; None where it does not launch."""
        backend = self.launches(anq.NAME)
        if backend is None or not anq.applies(x, r, norm_weight, w, scales, biases,
                                              group_size, bits):
            return None
        return anq.kernel(x, r, norm_weight, eps, w, scales, biases, group_size, bits,
                          backend=backend)

    def qmm_rows(self, x, w, scales, biases, group_size: int, bits: int):
        """x [..., K] times a 4- or 8-bit affine quantized weight [N, K * bits / 32]
        (transposed), as mx.quantized_matmul, for decode batches of kernels.qmm_rows."""
        backend = self.launches(qr.NAME)
        if backend is None:
            return None
        rows = x.reshape(-1, x.shape[-1])
        if not qr.applies(rows, w, scales, biases, group_size, bits):
            return None
        y = qr.kernel(rows, w, scales, biases, group_size, bits, backend=backend)
        return y.reshape(*x.shape[:-1], w.shape[0])


# What a layer holds until its model is given a kernel set (models built outside an engine).
NO_KERNELS = KernelSet.plain("no kernel set given to this model")
