"""Gated DeltaNet: the linear-attention layers of the Qwen3.5 / Qwen3-Next hybrids.

Each sequence keeps two states in the cache's slot arrays: the conv state (the
last K-1 inputs of the causal conv, [K-1, conv_dim]) and the float32 recurrent
state [Hv, Dv, Dk]. A forward gathers the states of its B rows, runs T tokens,
and scatters them back with one indexed assignment per array.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from engine.core import pool_scatters
from engine.core.batch_view import BatchView
from engine.models.base import StateSpec
from engine.models.elementwise import causal_conv_silu, decay_and_beta, silu_gated_norm
from engine.models.fused import fuse_linears
from engine.models.gated_delta import gated_delta, normalize_qk
from engine.models.projection import project
from engine.models.qwen3_5_config import ModelArgs
from engine.models.row_groups import RowGroups
from kernels.kernel_set import NO_KERNELS


class GatedRMSNorm(nn.Module):
    """RMSNorm of the recurrence output, gated by SiLU(z) (computed in float32): one
    launch where the kernel set has kernels/gated_rms_norm, else the norm and the gate."""

    def __init__(self, dims: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = mx.ones((dims,))
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def __call__(self, x: mx.array, z: mx.array) -> mx.array:
        """x, z [B, T, Hv, Dv] -> [B, T, Hv, Dv] in x's dtype."""
        out = self.kernel_set.gated_rms_norm(x, z, self.weight, self.eps)
        if out is not None:
            return out
        return silu_gated_norm(mx.fast.rms_norm(x, self.weight, self.eps), z, x)


class GatedDeltaNet(nn.Module):
    """Qwen3.5 layout: separate in_proj_qkv, in_proj_z, in_proj_b, in_proj_a."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.hk, self.dk = args.linear_num_key_heads, args.linear_key_head_dim
        self.hv, self.dv = args.linear_num_value_heads, args.linear_value_head_dim
        self.key_dim, self.conv_dim = args.key_dim, args.conv_dim
        self.kernel = args.linear_conv_kernel_dim
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel,
                                groups=self.conv_dim, bias=False)
        self._make_projections(args)
        self.dt_bias = mx.ones((self.hv,))
        self.A_log = mx.log(mx.random.uniform(1.0, 16.0, (self.hv,)))
        self.norm = GatedRMSNorm(self.dv, args.rms_norm_eps)
        self.out_proj = nn.Linear(args.value_dim, args.hidden_size, bias=False)
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def _make_projections(self, args: ModelArgs):
        h = args.hidden_size
        self.in_proj_qkv = nn.Linear(h, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(h, args.value_dim, bias=False)
        self.in_proj_b = nn.Linear(h, self.hv, bias=False)
        self.in_proj_a = nn.Linear(h, self.hv, bias=False)

    _PROJECTIONS = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")

    def fuse_projections(self) -> None:
        """After loading: the input projections become one matmul (engine/models/fused.py)."""
        fuse_linears(self, self._PROJECTIONS, "in_proj")

    def _in_projections(self, x: mx.array) -> list[mx.array]:
        if "in_proj" in self:
            return self.in_proj(x)
        return [self[name](x) for name in self._PROJECTIONS]

    def unpack(self, parts: list[mx.array]):
        """One group's input projections [B, T, *] -> qkv [B, T, conv_dim],
        z [B, T, Hv, Dv], b, a [B, T, Hv]."""
        qkv, z, b, a = parts
        return qkv, z.reshape(*z.shape[:2], self.hv, self.dv), b, a

    def state_specs(self, dtype: mx.Dtype = mx.float32) -> tuple[StateSpec, ...]:
        """The conv state in the activations' dtype (it holds the last inputs, which are
        of that dtype: exact, and no casts in a step); the recurrent state in float32."""
        return (StateSpec((self.kernel - 1, self.conv_dim), dtype),
                StateSpec((self.hv, self.dv, self.dk), mx.float32))

    def __call__(self, x: mx.array, rows: RowGroups, states: list[mx.array],
                 input_norm: nn.RMSNorm | None = None) -> mx.array:
        """x [N, H] (every group's tokens) -> [N, H]: the projections run once on all
        tokens, the conv and the recurrence per group with its own view and slots.
        input_norm: x is the layer's input before this norm (its one reader, the joined
        input projection, applies it: kernels/qmv_normed at one decode row)."""
        if len(rows.views) == 1 and rows.views[0].num_tokens == 1:
            projections = self._decode_projections(x, input_norm)
            y = self._decode_by_kernels(projections, rows.views[0], states)
            if y is not None:
                return project(self.kernel_set, self.out_proj, y)            # [B, H]
            if isinstance(projections, mx.array):
                projections = self.in_proj.split(projections)
        else:
            projections = self._in_projections(x if input_norm is None else input_norm(x))
        parts = [rows.split(p) for p in projections]                         # per group [B, T, *]
        writes = ([], [])        # per state array: (slots, rows) of every group
        # The conv kernel rewrites the pool in place; beside another group's deferred
        # scatter into the same pool (which would copy it, racing the kernel's writes)
        # it is not used: only in a forward of one group.
        conv_kernel = len(rows.views) == 1
        ys = [self._mix(*self.unpack(list(group)), view, states, writes, conv_kernel)
              for view, *group in zip(rows.views, *parts)]
        for i, pending in enumerate(writes):
            if pending:
                states[i] = _write_slots(states[i], pending)
        return project(self.kernel_set, self.out_proj, rows.join(ys))        # [N, H]

    def _decode_projections(self, x: mx.array, input_norm: nn.RMSNorm | None = None
                            ) -> list[mx.array] | mx.array:
        """A decode step's input projections: the joined one's output [B, *] unsplit where
        the kernels read its parts as columns (this layout, joined), else the parts."""
        if "in_proj" in self and self._JOINED_DECODE:
            return self.in_proj.joined_output(x, norm=input_norm)
        return self._in_projections(x if input_norm is None else input_norm(x))

    # Qwen3.5's joined input projection is [qkv | z | b | a]: the decode kernels read each
    # part as columns of it (no Split node a layer). Qwen3-Next's grouped one is not.
    _JOINED_DECODE = True

    def _decode_by_kernels(self, projections: list[mx.array] | mx.array, view: BatchView,
                           states: list[mx.array]) -> mx.array | None:
        """A forward of one decode group on [B, *] arrays: the conv kernel, then the step
        with its gated norm in one launch (or the step, then the norm) -> [B, Hv*Dv].
        projections: the parts, or the joined output (`_decode_projections`), whose
        columns the kernels read. None: no conv kernel for this call (nothing written:
        the general path runs). No [B, 1, *] views: every node of a compiled step is
        replayed on the host."""
        joined = isinstance(projections, mx.array)
        if joined:
            qkv = z = b = a = projections                                    # [B, *]
        else:
            qkv, z, b, a = self.unpack_rows(projections)  # [B, C], [B, Hv*Dv]*, [B, Hv] x2
        fresh = view.fresh_rows if view.any_fresh else None                  # [B] or None
        conv = self.kernel_set.gdn_conv_step(qkv, self.conv1d.weight, states[0],
                                             view.state_slots, fresh,
                                             (self.hk, self.hv, self.dk, self.dv), 1e-6)
        if conv is None:
            return None
        (q, k, v), states[0] = conv                                          # [B, H, D]
        if joined:
            columns = tuple(self.in_proj.parts.starts[1:])                  # z's, b's, a's
            y = self._kernel_step(q, k, v, a, b, view, states, z, columns)
            if y is not None:
                return y                                                     # [B, Hv*Dv]
            _, z, b, a = self.unpack_rows(self.in_proj.split(projections))
        y = self._kernel_decode_step(q, k, v, a, b, z, view, states)        # [B, Hv*Dv]
        if y is not None:
            return y
        writes = []              # no step kernel: the plain recurrence, on [B, 1, *]
        y = self._recurrence(*(t[:, None] for t in (q, k, v, a, b)), view, states, writes)
        states[1] = _write_slots(states[1], writes)
        return self.norm(y, z.reshape(y.shape)).reshape(y.shape[0], -1)

    def _kernel_decode_step(self, q, k, v, a, b, z, view: BatchView,
                            states: list[mx.array]) -> mx.array | None:
        """Decode on [B, *] arrays through the step kernels: the step with its gated norm
        in one launch, else the step, then the norm -> [B, Hv*Dv]; None: no step kernel
        for this call (nothing written)."""
        y = self._kernel_step(q, k, v, a, b, view, states, z)               # norm inside
        if y is not None:
            return y                                                         # [B, Hv*Dv]
        y = self._kernel_step(q, k, v, a, b, view, states)
        if y is None:
            return None
        # as a chunk's: its kernel takes [B, T, H, D]
        y = self.norm(y[:, None], z.reshape(y.shape)[:, None])
        return y.reshape(y.shape[0], -1)

    def unpack_rows(self, parts: list[mx.array]):
        """Decode's input projections [B, *] -> qkv [B, conv_dim], z [B, Hv*Dv], b, a
        [B, Hv]: `unpack` without the token axis, z with its heads joined as the step
        kernel reads it (no reshape node a layer; *Qwen3-Next's: [B, Hv, Dv])."""
        return parts

    def _mix(self, qkv, z, b, a, view: BatchView, states: list[mx.array],
             writes: tuple[list, list], conv_kernel: bool) -> mx.array:
        """One group's conv, recurrence and gated norm -> [B, T, value_dim]. The new conv
        (and reference recurrent) states go to `writes`, written once for all groups
        after every group has read its own (_write_slots says why). A decode group's step
        and gated norm are one launch where the kernel set has it, else two."""
        B, T, _ = qkv.shape
        # A decode group alone took _decode_by_kernels where its conv kernel applies.
        qkv_heads = self._kernel_conv(qkv, view, states) if conv_kernel and T > 1 else None
        if qkv_heads is not None:
            q, k, v = qkv_heads                                              # [B, T, H, D]
        else:
            q, k, v = self._conv(qkv, view, states, writes[0])               # [B, T, H, D]
        if T == 1 and self.kernel_set.backend is not None:    # decode beside another group
            y = self._kernel_decode_step(*(t[:, 0] for t in (q, k, v, a, b, z)), view, states)
            if y is not None:
                return y.reshape(B, T, -1)                                   # [B, T, Hv*Dv]
        y = self._recurrence(q, k, v, a, b, view, states, writes[1])         # [B, T, Hv, Dv]
        y = self.norm(y, z)                                                  # [B, T, Hv, Dv]
        return y.reshape(B, T, -1)                                           # [B, T, Hv*Dv]

    def _kernel_conv(self, qkv, view: BatchView, states: list[mx.array]):
        """A prompt chunk's (q, k, v) [B, T, H, D] from this model's conv kernel, which
        writes each row's new conv state, at its own length, into the pool itself
        (kernels/gdn_conv_chunk.py); None: no kernel for this call. (Decode's conv kernel
        is gdn_conv_step, in _decode_by_kernels.)"""
        fresh = view.fresh_rows if view.any_fresh else None                  # [B] or None
        lengths = view.lengths if view.ragged else None
        out = self.kernel_set.gdn_conv_chunk(qkv, self.conv1d.weight, states[0],
                                             view.state_slots, fresh, lengths,
                                             (self.hk, self.hv, self.dk, self.dv), 1e-6)
        if out is None:
            return None
        (q, k, v), states[0] = out
        return q, k, v

    def _conv(self, qkv, view: BatchView, states: list[mx.array], writes: list):
        """The conv over the chunk (its state gathered; the new one to `writes`), SiLU,
        q/k normalised: (q, k [B, T, Hk, Dk], v [B, T, Hv, Dv])."""
        B, T, _ = qkv.shape
        slots = view.state_slots
        # Slots are reused without clearing: a row starting a sequence reads zeros.
        conv_state = states[0][slots]                                        # [B, K-1, C]
        if view.any_fresh:
            fresh = view.fresh_rows[:, None, None]                           # [B, 1, 1]
            conv_state = mx.where(fresh, mx.array(0, conv_state.dtype), conv_state)
        conv_state = conv_state.astype(qkv.dtype)                            # no-op when equal

        conv_in = mx.concatenate([conv_state, qkv], axis=1)                  # [B, K-1+T, C]
        writes.append((slots, self._conv_tail(conv_in, view).astype(states[0].dtype)))
        conv_out = causal_conv_silu(conv_in, self.conv1d.weight)             # [B, T, C]

        q, k, v = mx.split(conv_out, [self.key_dim, 2 * self.key_dim], axis=-1)
        q = q.reshape(B, T, self.hk, self.dk)                                # [B, T, Hk, Dk]
        k = k.reshape(B, T, self.hk, self.dk)                                # [B, T, Hk, Dk]
        v = v.reshape(B, T, self.hv, self.dv)                                # [B, T, Hv, Dv]
        q, k = normalize_qk(q, k)
        return q, k, v

    def _recurrence(self, q, k, v, a, b, view: BatchView, states: list[mx.array],
                    writes: list):
        """Delta rule over T tokens from the raw gates a, b [B, T, Hv]; reads the slot pool
        states[1] (the chunk kernel turns a, b into the decay and beta itself and writes
        the pool in place; the reference's new states go to `writes`)."""
        slots = view.state_slots
        fresh = view.fresh_rows if view.any_fresh else None                  # [B] or None
        out = self._kernel_recurrence(q, k, v, a, b, view, states[1], fresh)
        if out is not None:
            y, states[1] = out
            return y
        g, beta = decay_and_beta(self.A_log, a, self.dt_bias, b)             # [B, T, Hv] x2
        state = states[1][slots]                                             # [B, Hv, Dv, Dk]
        if fresh is not None:
            state = mx.where(fresh[:, None, None, None], 0.0, state)
        mask = _valid_mask(view) if view.ragged else None                    # [B, T]
        y, new_state = gated_delta(q, k, v, g, beta, state, mask)            # [B, T, Hv, Dv]
        writes.append((slots, new_state))
        return y

    def _kernel_step(self, q, k, v, a, b, view: BatchView, states: list[mx.array], z=None,
                     columns: tuple[int, int, int] | None = None):
        """Decode (q, k [B, Hk, Dk], v [B, Hv, Dv], a, b [B, Hv]): y [B, Hv, Dv] from this
        model's step kernel, which turns the raw a, b into the decay and beta itself and
        updates each row's state in the pool in place (kernels/gated_delta_step.py). With
        z [B, Hv*Dv] or [B, Hv, Dv]: self.norm(y, z) [B, Hv*Dv] instead (the heads joined, declared so by
        the launch: no Reshape node), from the kernel that runs the step and the gated norm
        in one launch (kernels/gated_delta_step_norm.py); with `columns` (z's, b's, a's),
        z, b and a are the joined input projection, read there. None: no such kernel for
        this call."""
        fresh = view.fresh_rows if view.any_fresh else None                  # [B] or None
        args = (q, k, v, a, b, states[1], view.state_slots)
        decay = (self.A_log, self.dt_bias)
        if z is None:
            out = self.kernel_set.gated_delta_step(*args, fresh, decay=decay)
        else:
            # (g, beta) are (a, b): columns in the kernel's order (z's, beta's, g's)
            out = self.kernel_set.gated_delta_step_norm(*args, z, self.norm.weight,
                                                        self.norm.eps, fresh, decay=decay,
                                                        joined=True, columns=columns)
        if out is None:
            return None
        y, states[1] = out
        return y

    def _kernel_recurrence(self, q, k, v, a, b, view: BatchView, pool: mx.array, fresh):
        """(y [B, T, Hv, Dv], pool) from this model's chunk kernel, which gathers, updates
        and writes each row's state in the pool itself; None: no kernel for this call
        (decode's step kernel is tried before, in _kernel_step)."""
        if view.num_tokens == 1:
            return None
        lengths = view.lengths if view.ragged else None
        return self.kernel_set.gated_delta_chunk(q, k, v, a, b, pool, view.state_slots,
                                                 lengths, fresh, decay=(self.A_log, self.dt_bias))

    def _conv_tail(self, conv_in: mx.array, view: BatchView) -> mx.array:
        """The last K-1 conv inputs at each row's own length: [B, K-1, C]."""
        keep = self.kernel - 1
        if not view.ragged:
            return conv_in[:, -keep:, :]
        idx = view.tail_index(keep)                                          # [B, K-1]
        return mx.take_along_axis(conv_in, idx[..., None], axis=1)


class NextGatedDeltaNet(GatedDeltaNet):
    """Qwen3-Next layout: in_proj_qkvz and in_proj_ba, grouped per key head."""

    def _make_projections(self, args: ModelArgs):
        h = args.hidden_size
        self.in_proj_qkvz = nn.Linear(h, 2 * self.key_dim + 2 * args.value_dim, bias=False)
        self.in_proj_ba = nn.Linear(h, 2 * self.hv, bias=False)

    _PROJECTIONS = ("in_proj_qkvz", "in_proj_ba")
    _JOINED_DECODE = False

    def unpack(self, parts: list[mx.array]):
        qkvz, ba = parts
        B, T, _ = qkvz.shape
        r = self.hv // self.hk  # value heads per key head
        # Per key head the fused output holds [q (Dk), k (Dk), v (r*Dv), z (r*Dv)].
        qkvz = qkvz.reshape(B, T, self.hk, -1)                              # [B, T, Hk, *]
        q, k, v, z = mx.split(qkvz, [self.dk, 2 * self.dk, 2 * self.dk + r * self.dv], -1)
        ba = ba.reshape(B, T, self.hk, 2 * r)                                # [B, T, Hk, 2r]
        b, a = ba[..., :r], ba[..., r:]
        qkv = mx.concatenate([q.reshape(B, T, -1), k.reshape(B, T, -1),
                              v.reshape(B, T, -1)], axis=-1)                 # [B, T, conv_dim]
        return (qkv, z.reshape(B, T, self.hv, self.dv),
                b.reshape(B, T, self.hv), a.reshape(B, T, self.hv))

    def unpack_rows(self, parts: list[mx.array]):
        """As the base class's: its grouped layout unpacked with a token axis of 1."""
        return tuple(t[:, 0] for t in self.unpack([p[:, None] for p in parts]))


def _valid_mask(view: BatchView) -> mx.array:
    """[B, T] bool: token t of a row is real (not right padding)."""
    return mx.arange(view.num_tokens, dtype=mx.int32)[None, :] < view.lengths[:, None]


def _write_slots(pool: mx.array, writes: list[tuple[mx.array, mx.array]]) -> mx.array:
    """Scatter every group's rows into its slots of a state pool in ONE scatter. MLX
    updates a pool in place only when nothing else holds it: a second group's scatter
    after the first group's read would copy the whole pool (see attention.write_kv)."""
    slots = mx.concatenate([s for s, _ in writes]) if len(writes) > 1 else writes[0][0]
    rows = mx.concatenate([r for _, r in writes]) if len(writes) > 1 else writes[0][1]
    pool[slots] = rows
    pool_scatters.note()        # queued on a GPU only once no earlier reader holds the pool
    return pool
