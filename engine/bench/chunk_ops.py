"""Operations one prompt-chunk forward dispatches (``profile_ops --chunk``).

A mixed step on a GPU runs the streams' compiled decode forward and, beside it, the
chunk's own UNCOMPILED prefill forward (mixed forwards off, compile_chunks off:
docs/ENGINE.md, "What the floor allows"). That forward is built here through the
Runner's public prefill(), as the step loop calls it, at the fixed shapes the GPU
runs (fixed_shapes on), for one row of T tokens in three variants:

- first: a prompt's first chunk (offset 0: recurrent states start from zero),
- later: a chunk after earlier ones (offset T: it attends to the cached prefix),
- padded: a later chunk of T - 1 real tokens run at T (the ragged path a prompt's
  last chunk takes).
"""
from __future__ import annotations

from contextlib import nullcontext

import mlx.core as mx

from engine.bench.counted_model import counted_model
from engine.bench.op_parts import parts_of_qwen3_5
from engine.bench.profile_ops import ops_by_primitive
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from kernels.stand_in import gpu_graph

VARIANTS = ("first", "later", "padded")


def chunk_runner(config: dict, path: str) -> Runner:
    """A runner over a synthetic model of `config`, as the engine builds it on `path`."""
    model = counted_model(config, path)
    runner = Runner(model, EngineConfig(max_num_seqs=8, page_size=16, num_pages=256,
                                        fixed_shapes=path != "cpu",
                                        compile_decode=path != "cpu"))
    mx.eval(runner.cache_arrays())        # as in the engine: the pools exist before a step
    return runner


def _chunk(length: int, variant: str) -> PrefillChunk:
    """One row's chunk of `length` positions in the given variant (pages 1..8)."""
    start = 0 if variant == "first" else length
    real = length - 1 if variant == "padded" else length
    seq = Sequence(0, list(range(start + real)), None)
    seq.pages, seq.slot, seq.num_computed = list(range(1, 9)), 0, start
    return PrefillChunk(seq, start, real)


def chunk_ops(config: dict, length: int, variant: str = "later", path: str = "gpu",
              by_part: bool = False):
    """Ops (views excluded; [name]: a stand-in launch) of one prefill forward of a
    `length`-token chunk; by_part: also (ops by part, calls by part, ops of each
    part's last call) from engine/bench/op_parts.py."""
    runner = chunk_runner(config, path)
    chunk = _chunk(length, variant)
    with gpu_graph() if path == "gpu" else nullcontext() as ledger:
        with parts_of_qwen3_5(ledger) if by_part else nullcontext() as parts:
            outputs = [runner.prefill([chunk]), *runner.cache_arrays()]
        ops = ops_by_primitive(*outputs)
    if ledger is not None:
        ops.update({f"[{name}]": n for name, n in ledger.calls.items()})
    if not by_part:
        return ops
    return ops, parts.ops, parts.calls, parts.last_call
