"""Turns scheduled sequences into arrays, runs the model, returns last-token logits.

Only the engine thread calls this (it touches mx).
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.arith import ceil_div
from engine.cache.cache_manager import DeviceCopies
from engine.config import EngineConfig
from engine.core import pool_scatters
from engine.core.batch_view import BatchView
from engine.core.bounded_prefill import pieces_for, queue_in_pieces
from engine.core.compiled_forward import CompiledForward, compiles_forward
from engine.core.disk_transfer import gather_save, write_load
from engine.core.host_arrays import constant, upload
from engine.core.sequence import Sequence
from engine.core.shapes import MIN_TABLE_WIDTH, padded_batch, padded_chunk, table_width
from engine.models.base import ModelCache
from engine.models.layer_pieces import Carry

PAGE_BUCKET = 8   # block tables are padded to a multiple of this many pages (fewer shapes)


def pads_to_fixed_shapes(config: EngineConfig) -> bool:
    """config.fixed_shapes, or when None: on a GPU (MLX compiles kernels per shape there;
    on the CPU a padded row or token is only more work)."""
    if config.fixed_shapes is not None:
        return config.fixed_shapes
    return mx.default_device().type == mx.DeviceType.gpu


class Runner:
    """Forwards at the fixed shapes of engine/core/shapes.py where they pay
    (pads_to_fixed_shapes): a decode batch of n rows runs padded to the next decode size. A padding row copies row 0's token, position
    and block table (so it reads only what row 0 reads and routes to row 0's experts)
    but writes its K/V into the scratch page 0 and its recurrent state into the scratch
    slot past the cache manager's slots: it changes nothing a sequence owns."""

    def __init__(self, model, config: EngineConfig, num_pages: int | None = None):
        self.model = model
        self.config = config
        self.page_size = config.page_size
        self.fixed_shapes = pads_to_fixed_shapes(config)
        # One state slot more than the cache manager hands out: the padding rows' scratch.
        self.scratch_slot = config.num_state_slots
        self.cache = ModelCache(model.cache_spec(), num_pages or config.num_pages, config.page_size,
                                num_slots=config.num_state_slots + 1)
        # Decode forwards through mx.compile (engine/core/compiled_forward.py), or None.
        self.compiled = CompiledForward(model) if compiles_forward(config.compile_decode) else None
        # Prompt chunks and mixed steps through mx.compile (EngineConfig.compile_chunks).
        self.compiled_chunks = ((self.compiled or CompiledForward(model))
                                if config.compile_chunks else None)

    def build_view(self, rows: list[tuple[list[int], int, int, int]], num_tokens: int,
                   all_logits: bool = False, real_rows: int | None = None,
                   stable: bool = False) -> BatchView:
        """rows: (pages, state slot, start position, new tokens) per row, right-padded to T.
        Rows from real_rows on are padding: their K/V go to the scratch page 0 and their
        MoE routing is row 0's (BatchView.route_rows). stable: for a compiled forward,
        few layouts: block tables in power-of-two widths and no context_len (it changes
        every step; the paged decode kernel reads context_lens instead)."""
        ps, B, T = self.page_size, len(rows), num_tokens
        num_pages = max(ceil_div(start + n, ps) for _, _, start, n in rows)
        P = ceil_div(num_pages, PAGE_BUCKET) * PAGE_BUCKET
        if stable:
            P = table_width(num_pages)
        tables = np.zeros((B, P), np.int32)
        slot_mapping = np.empty((B, T), np.int32)
        offsets = np.empty(B, np.int32)
        lengths = np.empty(B, np.int32)
        slots = np.empty(B, np.int32)
        for b, (pages, slot, start, n) in enumerate(rows):
            used = min(len(pages), P)          # pages past the chunk's end are not read
            tables[b, :used] = pages[:used]
            pos = start + np.arange(T)
            real = tables[b, np.minimum(pos // ps, P - 1)] * ps + pos % ps
            slot_mapping[b] = np.where(np.arange(T) < n, real, np.arange(T) % ps)
            if real_rows is not None and b >= real_rows:
                slot_mapping[b] = np.arange(T) % ps      # scratch page 0
            offsets[b], lengths[b], slots[b] = start, n, slot
        positions = offsets[:, None] + np.arange(T, dtype=np.int32)[None]
        # One host allocation for all six (engine/core/host_arrays.py: on CUDA each may cost
        # a blocking copy); the fields are views into it.
        dev = upload([offsets, lengths, positions, slot_mapping, tables, slots])
        return BatchView(
            offsets=dev[0], lengths=dev[1], positions=dev[2], slot_mapping=dev[3],
            block_tables=dev[4], state_slots=dev[5], page_size=ps,
            num_tokens=T, ragged=bool((lengths < T).any()), all_logits=all_logits,
            context_len=int(offsets[0]) + T if not stable and (offsets == offsets[0]).all()
            and (lengths == T).all() else None, any_fresh=bool((offsets == 0).any()),
            route_rows=_route_rows(B, real_rows) if T == 1 else None)

    def forward(self, tokens: np.ndarray, view: BatchView, cache: ModelCache | None = None,
                compiled: bool = False):
        """compiled: through self.compiled (decode views built with stable=True)."""
        cache = cache or self.cache
        if compiled and self.compiled is not None:
            logits = self.compiled(_ids(tokens), view, cache)
        else:
            logits = self.model(_ids(tokens), view, cache)
        return logits, cache.arrays()

    def forward_groups(self, groups: list[tuple]) -> list[mx.array]:
        """One forward over (tokens, view) groups (engine/models/row_groups.py) in the
        runner's cache -> each group's logits (lazy)."""
        return self.model.forward_groups([(_ids(t), v) for t, v in groups], self.cache)

    def decode(self, seqs: list[Sequence]) -> mx.array:
        """One forward for every decoding sequence -> logits [n, V] (lazy); it runs at the
        padded batch size (engine/core/shapes.py) with fixed shapes, padding rows copying
        row 0."""
        stable = self.compiled is not None
        logits, _ = self.forward(*self._decode_inputs(seqs, stable), compiled=stable)
        return logits[:len(seqs), -1, :]

    def prefill(self, chunks) -> mx.array:
        """One ragged forward over prompt chunks -> each row's last-token logits [B, V] (lazy);
        it runs at the next chunk length of engine/core/shapes.py (right padding) with
        fixed shapes, else at the longest chunk's length."""
        if self.compiled_chunks is not None:
            tokens, view = self._prefill_inputs(chunks, stable=True)
            return self.compiled_chunks(_ids(tokens), view, self.cache)[:, -1, :]
        tokens, view = self._prefill_inputs(chunks)
        pieces = self._bounded_pieces(chunks, tokens.shape[1])
        if pieces > 1:
            # Runner's own prefill_piece: the same forward, split (not a hook's).
            def piece(span, carry):
                return Runner.prefill_piece(self, chunks, span, carry, (tokens, view))
            return queue_in_pieces(piece, len(self.model.layers), pieces, self.cache_arrays)
        logits, _ = self.forward(tokens, view)
        return logits[:, -1, :]

    def _bounded_pieces(self, chunks, tokens: int) -> int:
        """The pieces a plain chunk forward is queued in (engine/core/bounded_prefill.py):
        1 unless config.bounded_prefill and its attention would hold too much at once."""
        if not (self.config.bounded_prefill and self.reads_in_pieces):
            return 1
        context = max(c.start + c.num_tokens for c in chunks)
        return pieces_for(self.model, tokens, context)

    # A chunk's layers may run over several steps (prefill_piece); the distributed
    # leader's forwards are broadcast whole, so it cannot.
    reads_in_pieces = True

    def prefill_piece(self, chunks, layers: tuple[int, int], carry: Carry | None = None,
                      inputs: tuple | None = None) -> Carry | mx.array:
        """The layers [start, stop) of prefill(chunks)'s forward (plain, never compiled;
        engine/models/layer_pieces.py): the Carry for the next piece, or after the last
        layer each row's last-token logits [B, V] as prefill returns them (lazy). inputs:
        the (tokens, view) the first piece built (prefill_inputs), reused by the rest."""
        tokens, view = inputs if inputs is not None else self.prefill_inputs(chunks)
        out = self.model.forward_groups([(_ids(tokens), view)], self.cache, layers=layers,
                                        carry=carry)
        return out if isinstance(out, Carry) else out[0][:, -1, :]

    def prefill_inputs(self, chunks) -> tuple:
        """(tokens [B, T], view) of prefill(chunks)'s plain forward."""
        return self._prefill_inputs(chunks)

    def mixed(self, seqs: list[Sequence], chunks) -> tuple[mx.array, mx.array]:
        """decode(seqs) and prefill(chunks) as ONE forward (a mixed forward: each weight
        read once for both) -> (decode logits [n, V], chunks' last-token logits [B, V]),
        lazy; the same rows, padding and shapes as the two calls."""
        stable = self.compiled_chunks is not None
        groups = [self._decode_inputs(seqs, stable), self._prefill_inputs(chunks, stable)]
        if stable:
            decode, prefill = self.compiled_chunks.groups([(_ids(t), v) for t, v in groups],
                                                          self.cache)
        else:
            decode, prefill = self.forward_groups(groups)
        return decode[:len(seqs), -1, :], prefill[:, -1, :]

    def _decode_inputs(self, seqs: list[Sequence], stable: bool = False) -> tuple:
        """(tokens [B, 1], view) of a decode forward, padded to B rows with fixed shapes;
        stable: a view for the compiled forward (build_view)."""
        n = len(seqs)
        B = padded_batch(n, self.config.max_num_seqs) if self.fixed_shapes else n
        rows = [(s.pages, s.slot, s.num_tokens - 1, 1) for s in seqs]
        rows += [(seqs[0].pages, self.scratch_slot, seqs[0].num_tokens - 1, 1)] * (B - n)
        view = self.build_view(rows, 1, real_rows=n if B > n else None, stable=stable)
        return self._decode_tokens(seqs + [seqs[0]] * (B - n)), view

    def _prefill_inputs(self, chunks, stable: bool = False) -> tuple:
        """(tokens [B, T], view) of the chunks, right-padded to T (a chunk length of
        engine/core/shapes.py with fixed shapes, else the longest chunk); stable: a view
        for a compiled forward (build_view)."""
        longest = max(c.num_tokens for c in chunks)
        T = (padded_chunk(longest, max(self.config.prefill_chunk, longest))
             if self.fixed_shapes else longest)
        tokens = np.zeros((len(chunks), T), np.int32)
        for b, c in enumerate(chunks):
            tokens[b, :c.num_tokens] = c.seq.all_ids[c.start:c.start + c.num_tokens]
        rows = [(c.seq.pages, c.seq.slot, c.start, c.num_tokens) for c in chunks]
        return tokens, self.build_view(rows, T, stable=stable)

    def warm_decode(self, batch: int, padded: bool = True,
                    width: int = MIN_TABLE_WIDTH) -> mx.array:
        """A decode forward of `batch` rows (the warm-up's) whose every write goes to the
        scratch page and slot. padded: as padding rows (with route_rows), else as a full
        batch (without): a compiled forward traces each layout. width: the block tables'
        pages (a compiled forward traces each width too). Returns logits (lazy)."""
        stable = self.compiled is not None
        logits, _ = self.forward(*self._warm_decode_inputs(batch, padded, stable, width),
                                 compiled=stable)
        return logits

    def warm_prefill(self, length: int, tokens: int | None = None) -> mx.array:
        """A first prompt chunk of `tokens` (default: all) real tokens run at `length`,
        into the scratch page and slot: fewer tokens than length is the ragged path."""
        logits, _ = self.forward(*self._warm_prefill_inputs(length, tokens))
        return logits

    def warm_compiled_chunk(self, length: int, width: int, fresh: bool,
                            ragged: bool) -> mx.array:
        """One compiled prompt chunk (compile_chunks) of `length` at a `width`-page block
        table: the first of its prompt (fresh) or a later one ending on the table's last
        page, with all its tokens or one fewer (ragged); into the scratch page and slot.
        Returns its logits (lazy)."""
        tokens = length - 1 if ragged else length
        start = 0 if fresh else width * self.page_size - length
        rows = [([0] * width, self.scratch_slot, start, tokens)]
        view = self.build_view(rows, length, real_rows=0, stable=True)
        return self.compiled_chunks(_ids(np.zeros((1, length), np.int32)), view, self.cache)

    def warm_mixed(self, batch: int, length: int, padded: bool = False) -> list[mx.array]:
        """A mixed forward of `batch` padding decode rows and a `length`-token chunk (one
        token short of it when padded: the ragged path), all into the scratch page and
        slot (the warm-up's). Returns its logits (lazy)."""
        chunk = self._warm_prefill_inputs(length, length - 1 if padded else length)
        return self.forward_groups([self._warm_decode_inputs(batch), chunk])

    def _warm_decode_inputs(self, batch: int, padded: bool = True,
                            stable: bool = False, width: int = MIN_TABLE_WIDTH) -> tuple:
        # A context of `width` pages, every one the scratch page 0: the table is that
        # wide and the token's K/V lands in scratch.
        rows = [([0] * width, self.scratch_slot, width * self.page_size - 1, 1)] * batch
        view = self.build_view(rows, 1, real_rows=0 if padded else None, stable=stable)
        return np.zeros((batch, 1), np.int32), view

    def _warm_prefill_inputs(self, length: int, tokens: int | None = None) -> tuple:
        tokens = length if tokens is None else tokens
        view = self.build_view([([0], self.scratch_slot, 0, tokens)], length, real_rows=0)
        return np.zeros((1, length), np.int32), view

    @staticmethod
    def _decode_tokens(seqs: list[Sequence]):
        """[B, 1] input ids: the last token of each row, taken on the device when it was
        sampled by a step whose result the host has not read yet (no sync needed)."""
        if not any(s.pending for s in seqs):
            return np.array([[s.all_ids[-1]] for s in seqs], np.int32)
        arrays, offsets, index, host = [], {}, [], []
        for s in seqs:
            if s.pending:
                arr, row = s.pending[-1]
                if id(arr) not in offsets:
                    offsets[id(arr)] = sum(a.size for a in arrays)
                    arrays.append(arr)
                index.append(offsets[id(arr)] + row)
            else:
                index.append(-1 - len(host))
                host.append(s.all_ids[-1])
        base = sum(a.size for a in arrays)
        index = [i if i >= 0 else base + (-1 - i) for i in index]
        source = mx.concatenate(arrays + [mx.array(host, mx.int32)] if host else arrays)
        return source.astype(mx.int32)[constant(tuple(index), mx.int32)].reshape(-1, 1)

    def copy(self, copies: DeviceCopies) -> list[tuple]:
        """A plan's device-side copies, queued before its forward (lazy). Returns each
        DiskSave with its gathered arrays (evaluate them with the step).

        Saves are gathered first: a kept turn evicted while planning may have had its
        pages and slot handed out again, and this plan's copies and loads write into
        them. A snapshot's state is read from the slot its copy comes from.
        """
        snapshot_source = {dst: src for src, dst in copies.states}
        saves = [(save, self._save(save, snapshot_source.get(save.slot, save.slot)))
                 for save in copies.saves]
        # Queued now, before anything writes the pool: a gather still waiting to run holds
        # the pool, and MLX then copies the whole pool for the next scatter into it
        # instead of updating it in place (a 1 GB copy, seconds on a CPU, when a turn
        # ended and was kept for the disk cache: the other panes froze, issue 22).
        # (Settled: an empty step's copies, left unqueued on Metal, may be under them.)
        pool_scatters.queue([a for _, arrays in saves for a in arrays.values()])
        if copies.pages:
            self.copy_pages(copies.pages)
        if copies.states:
            self.copy_state_slots(copies.states)
        for load in copies.loads:
            self._load(load)
        return saves

    def _save(self, save, slot: int | None) -> dict[str, mx.array]:
        """A kept turn's arrays gathered for the disk cache (lazy; a distributed leader
        gathers every rank's part)."""
        return gather_save(self.cache, save, slot)

    def _load(self, load) -> None:
        """A disk entry written into the pool (a distributed leader scatters it)."""
        write_load(self.cache, load)

    def copy_pages(self, pairs: list[tuple[int, int]]) -> None:
        """Copy whole KV pages (src -> dst) in every attention layer (copy on write)."""
        ps = self.page_size
        offs = np.arange(ps, dtype=np.int32)
        src = mx.array(np.concatenate([s * ps + offs for s, _ in pairs]))
        dst = mx.array(np.concatenate([d * ps + offs for _, d in pairs]))
        _copy_within([pool for kv in self.cache.kv for pool in kv], src, dst)

    def copy_state_slots(self, pairs: list[tuple[int, int]]) -> None:
        """copy_state_slot for each (src, dst) in order, as one scatter a state array.

        Why: a step after k prompts end carries k turn snapshots (CacheManager.snapshot);
        copied one by one they were 2 x 30 scatters each on Qwen3.5, so the step's graph
        changed with k, and on CUDA every graph MLX commits after them (a step's ops cut
        every ~100) was a structure its exec cache had not met: instantiated anew, ~27 ms
        of host time in such a step on session 44's H100 (docs/PERFORMANCE.md, the
        slowest step). One scatter an array whatever k. Pairs that chain (a destination
        read by a later pair) or repeat a destination keep the one-by-one order."""
        srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
        if set(srcs) & set(dsts) or len(set(dsts)) < len(dsts):
            for src, dst in pairs:
                self.copy_state_slot(src, dst)
            return
        self._copy_states(srcs, dsts)

    def copy_state_slot(self, src: int, dst: int) -> None:
        """Copy one sequence's recurrent and conv states into another slot (a snapshot)."""
        self._copy_states([src], [dst])

    def _copy_states(self, srcs: list[int], dsts: list[int]) -> None:
        """Every state array's slots srcs -> dsts, one scatter an array."""
        # No wait (engine/core/pool_scatters.py), so the gather goes with its scatter: the
        # state pools are bounded by max_num_seqs, not by the context budget, and a turn's
        # snapshot lands in the first step after its prompt ends, whose pipelining a wait
        # would cut (a host's step more: issue 23's slowest step). On a GPU MLX copies the
        # state pools here.
        s, d = mx.array(srcs), mx.array(dsts)
        for layer in self.cache.states:
            for arr in layer:
                arr[d] = arr[s]

    def cache_arrays(self) -> list[mx.array]:
        return self.cache.arrays()

    def full_logits(self, token_ids: list[int]) -> mx.array:
        """All logits of one sequence in a private cache (scoring and tests): [T, V] float32."""
        T = len(token_ids)
        num_pages = ceil_div(T, self.page_size) + 1
        cache = ModelCache(self.model.cache_spec(), num_pages + 1, self.page_size, 1)
        view = self.build_view([(list(range(1, num_pages + 1)), 0, 0, T)], T, all_logits=True)
        logits, arrays = self.forward(np.array([token_ids], np.int32), view, cache)
        out = logits[0].astype(mx.float32)
        mx.eval(out)
        return out


def _copy_within(pools: list[mx.array], src: mx.array, dst: mx.array) -> None:
    """Each pool's rows src -> dst (pools updated in place). The rows are gathered and
    queued first, the scatters after: a gather queued with its scatter would still hold
    the pool when the scatter runs, and on a GPU MLX would copy the whole pool for it
    (engine/core/pool_scatters.py: the step waits before queueing the scatters)."""
    rows = [pool[src] for pool in pools]
    mx.async_eval(rows)
    for pool, r in zip(pools, rows):
        pool[dst] = r
    pool_scatters.note()


def _route_rows(batch: int, real_rows: int | None) -> mx.array | None:
    """[B] int32: the row whose experts each row uses (itself; row 0 for padding rows),
    or None without padding. real_rows 0: the warm-up, every row a padding row."""
    if real_rows is None:
        return None
    return constant(tuple(i if i < real_rows else 0 for i in range(batch)), mx.int32)


def _ids(tokens) -> mx.array:
    """Input ids as an int32 mx array (host ids come as numpy)."""
    return tokens if isinstance(tokens, mx.array) else mx.array(tokens, dtype=mx.int32)
