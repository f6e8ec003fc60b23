"""Engine limits, fixed when a model is loaded."""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.arith import ceil_div


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 16          # sequences decoded together in one forward
    page_size: int = 16             # tokens per KV page
    # KV and state memory in MiB; None: a share of the memory left once the weights are
    # loaded (engine/cache/kv_budget.py). The pool's pages follow from the model's bytes
    # per token.
    kv_budget_mb: int | None = None
    # Low-level override of the budget: pages in the pool, page 0 (scratch) included.
    num_pages: int | None = None
    prefill_chunk: int = 512        # prompt tokens read per step (several prompts may share it)
    # While others stream, each keeps at least this pace (tokens per second, i.e. a step
    # of at most 1/15 s); prompt reading gets the time above the calm decode step up to
    # it (engine/core/prefill_budget.py). 0: no floor, a whole chunk every step.
    min_stream_tok_s: float = 15.0
    # Degraded mode, where the floor cannot hold (a CPU): reading a prompt may slow the
    # streams' calm step by this fraction (at least one smallest chunk is read). 1.25: a
    # stream's gap at most 2.25x its calm one, within issue 21's 2.5x. Measured on the
    # 2-core CPU, built-in model, 3 streams and a 200-token prompt (docs/PERFORMANCE.md):
    # 0.25 read 16 tokens a step and the prompt waited up to 4.2x its time alone; 1.5 gave
    # 1.7x but gaps up to 2.8x calm; 1.0 gave 2.3-2.9x (at the 2.5x target's edge) with
    # median gaps 1.7-2.0x calm; 1.25 gave 2.0-2.5x with median gaps 1.7-2.1x calm.
    max_decode_slowdown: float = 1.25
    # Fairness: after this many consecutive chunks of one prompt, the next prompt waiting
    # to be read gets its turn (engine/core/scheduler.py, _prefill_order).
    prefill_turn_chunks: int = 4
    # A step with decode rows and a prompt chunk runs them as one forward, reading each
    # weight once for both (engine/models/row_groups.py); False: two forwards. None:
    # one, except where that would take the decode rows out of their compiled forward
    # (compile_decode on, compile_chunks off): on the H200 the one mixed forward then
    # cost 2-8 ms more than the two (docs/PERFORMANCE.md, issue 21).
    mixed_forward: bool | None = None
    # A prompt chunk read beside decode rows runs a layer range a step over this many
    # steps (engine/models/layer_pieces.py, engine/core/chunk_pieces.py): each step pays
    # a share of the chunk's fixed cost (on a GPU most of a short chunk's), so the floor's
    # step holds longer chunks. 1: whole chunks. Steps of two forwards only (a mixed
    # forward shares its layers with the decode rows): with pieces, mixed_forward=None
    # runs two. None: 4 on a CUDA GPU (H200: a 2,048-token prompt beside 7 streams 1.54-
    # 1.61x its time alone against 2.19-2.28x whole), 1 elsewhere (the CPU's chunks have
    # little fixed cost; Metal not measured): chunk_pieces.pieces_of.
    chunk_pieces: int | None = None
    max_context: int = 8192         # prompt + generation, per sequence
    use_kernels: bool = True        # custom kernels where the self-test passed
    # Finished turns kept (pages and recurrent state) for each conversation's next turn.
    prefix_cache: bool = True
    num_cached_turns: int = 8       # extra state slots they may hold
    # On MLX's CPU backend: "dense" dequantizes to float32 at load (BLAS matmuls, many
    # times faster), "quantized" keeps 4/8-bit weights (less memory), "auto" goes dense
    # when the dense model takes at most a quarter of RAM (engine/loading/cpu_dense.py).
    cpu_weights: str = "auto"
    # Run every fixed decode/prefill shape once at load (engine/core/warm_up.py), so MLX
    # compiles their kernels then; None: on a GPU only (the CPU compiles nothing per shape).
    warm_up: bool | None = None
    # Of that warm-up, run at load only what a first conversation meets (its prompt's
    # chunks, a one-row decode at the first block-table width) and the rest while the
    # engine is idle, one shape between inbox reads: the app is ready minutes sooner on a
    # cold kernel cache (engine/core/warm_up.py). False: every shape before "Ready".
    warm_up_in_background: bool = True
    # Pad decode batches and prompt chunks up to the fixed sizes of engine/core/shapes.py
    # (a finite set of shapes to compile); None: on a GPU only. The CPU compiles nothing
    # per shape, so there padding is pure extra compute (a 320-token prompt run as 512
    # cost 1.8x the forward: docs/bench/HISTORY.md, "CPU").
    fixed_shapes: bool | None = None
    # Decode forwards through mx.compile (engine/core/compiled_forward.py): the graph
    # is traced once per shape and replayed, with fused elementwise kernels; None: on a
    # GPU only (there a step was bound by building its graph in Python).
    compile_decode: bool | None = None
    # Prompt chunks and mixed steps through mx.compile too (the same traces, one per
    # layout and shape). On the H200 a mixed step's fixed cost (~25 ms over the calm step
    # in one thread, ~45-95 ms in the engine beside 7 consumer threads) is mostly Python
    # building an uncompiled forward's graph (docs/ENGINE.md, "What the floor allows").
    # Off until a GPU run measures it (issue 21). Each chunk layout (length, block-table
    # width, first chunk or not, padded or not) is a trace of its own; the warm-up traces
    # them all (warm_up.compiled_chunk_shapes: 84 at the GPU defaults).
    compile_chunks: bool = False
    # Queue step n+1 on the device before reading step n back, so the device works while
    # the host plans and builds the next step; None: on a GPU only. MLX's CPU backend runs
    # a step's ops as they are queued (its async_eval returns with ~10 of them left), so
    # there the overlap is a few ms while every token reaches its stream one step later: a
    # new prompt's first token beside 3 streams came 0.2-0.3 s later on the 2-core CPU
    # (docs/PERFORMANCE.md, issue 21). A repetition penalty turns it off either way.
    pipeline_steps: bool | None = None
    # A prompt chunk read alone on CUDA whose attention would materialise more than 2 GiB
    # (long contexts at a head dim over 128: MLX's CUDA SDPA has no fused kernel there)
    # is queued a layer range at a time, at most two ranges on the device, so one
    # forward's attention scores are not all resident at once (engine/core/
    # bounded_prefill.py; issue 23, item 4). False: whole forwards always.
    bounded_prefill: bool = True
    # Kept turns are also written to this folder, so conversations resume after a
    # restart without re-reading their history (None: memory only).
    cache_dir: str | None = None
    disk_cache_mb: int = 4096       # the folder's byte budget (least recently used go)

    def __post_init__(self):
        for name in ("max_num_seqs", "page_size", "prefill_chunk", "max_context",
                     "prefill_turn_chunks"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be >= 1")
        if self.kv_budget_mb is not None and (isinstance(self.kv_budget_mb, bool) or not
                                              isinstance(self.kv_budget_mb, int)
                                              or self.kv_budget_mb < 1):
            raise ValueError("EngineConfig.kv_budget_mb must be a whole number of MB >= 1, "
                             "or None to size the KV cache from free memory")
        pace = self.min_stream_tok_s
        if (isinstance(pace, bool) or not isinstance(pace, (int, float))
                or not 0 <= pace < math.inf):
            raise ValueError("EngineConfig.min_stream_tok_s must be a number of tokens per "
                             f"second >= 0 (0 turns the reading-pace floor off), not {pace!r}")
        if (isinstance(self.disk_cache_mb, bool) or not isinstance(self.disk_cache_mb, int)
                or self.disk_cache_mb < 1):
            raise ValueError("EngineConfig.disk_cache_mb must be a whole number of MB >= 1")
        if self.cache_dir is not None and not str(self.cache_dir).strip():
            raise ValueError("EngineConfig.cache_dir must be a folder, or None to keep the "
                             "prompt cache in memory only")
        if self.max_decode_slowdown <= 0:
            raise ValueError("EngineConfig.max_decode_slowdown must be > 0")
        if self.cpu_weights not in ("auto", "dense", "quantized"):
            raise ValueError("EngineConfig.cpu_weights must be 'auto', 'dense' or 'quantized'")
        if self.warm_up is not None and not isinstance(self.warm_up, bool):
            raise ValueError("EngineConfig.warm_up must be True, False or None (on a GPU)")
        if not isinstance(self.warm_up_in_background, bool):
            raise ValueError("EngineConfig.warm_up_in_background must be True or False")
        if self.mixed_forward is not None and not isinstance(self.mixed_forward, bool):
            raise ValueError("EngineConfig.mixed_forward must be True, False or None (auto)")
        if self.fixed_shapes is not None and not isinstance(self.fixed_shapes, bool):
            raise ValueError("EngineConfig.fixed_shapes must be True, False or None (on a GPU)")
        if not isinstance(self.compile_chunks, bool):
            raise ValueError("EngineConfig.compile_chunks must be True or False")
        if self.chunk_pieces is not None:
            if self.chunk_pieces not in (1, 2, 4, 8):
                raise ValueError("EngineConfig.chunk_pieces must be 1, 2, 4, 8 or None (auto)")
            if self.chunk_pieces > 1 and self.mixed_forward:
                raise ValueError("EngineConfig.chunk_pieces > 1 needs two forwards a step "
                                 "(mixed_forward False or None)")
            if self.chunk_pieces > 1 and self.compile_chunks:
                raise ValueError("EngineConfig.chunk_pieces > 1 runs plain chunks "
                                 "(compile_chunks False)")
            if self.prefill_chunk % self.chunk_pieces:
                raise ValueError("EngineConfig.prefill_chunk must be a multiple of chunk_pieces")
        if self.compile_decode is not None and not isinstance(self.compile_decode, bool):
            raise ValueError("EngineConfig.compile_decode must be True, False or None (on a GPU)")
        if self.num_pages is not None and self.num_pages < 2:
            raise ValueError("EngineConfig.num_pages must be >= 2 (page 0 is scratch)")

    @property
    def max_useful_pages(self) -> int:
        """Pages that every sequence at full context would fill, plus the scratch page:
        a budget past this buys nothing."""
        return self.max_num_seqs * ceil_div(self.max_context, self.page_size) + 1

    @property
    def num_state_slots(self) -> int:
        return self.max_num_seqs + (self.num_cached_turns if self.prefix_cache else 0)

