"""Drive the engine's StepLoop directly (on the test's thread) and record logits."""
from __future__ import annotations

import mlx.core as mx

from engine.config import EngineConfig
from engine.core.output_stream import OutputStream
from engine.core.sampler import RowSampler
from engine.core.sequence import Sequence
from engine.core.step_loop import Request, StepLoop
from engine.events import StepEvent
from engine.models.layer_pieces import Carry
from engine.sampling_params import SamplingParams


class _NoDetok:
    def add(self, token_id):
        return ""

    def flush(self):
        return ""


class Harness:
    """Add sequences at chosen steps; keep every logits row each request produced."""

    def __init__(self, model, disk=None, **config):
        # The prompt budget follows measured step times; tests need the same plan on any
        # machine, so it is off here (always a whole chunk) and tested on its own.
        self.config = EngineConfig(**{"num_pages": 256, "page_size": 4,
                                      "min_stream_tok_s": 0.0, **config})
        self.steps = []           # StepEvents
        self.events = []          # request events
        self.loop = StepLoop(model, self.config, emit=self._collect,
                             num_pages=self.config.num_pages, disk_cache=disk)
        self.logits: dict[int, list[mx.array]] = {}
        self.seqs: dict[int, Sequence] = {}
        self._wrap_runner()

    def _collect(self, ev) -> None:
        (self.steps if isinstance(ev, StepEvent) else self.events).append(ev)

    def _wrap_runner(self):
        runner, logits = self.loop.runner, self.logits
        decode, prefill, mixed = runner.decode, runner.prefill, runner.mixed
        self.num_mixed = 0          # mixed forwards run (decode rows and chunks together)

        def keep_decode(seqs, out):
            for i, s in enumerate(seqs):
                logits.setdefault(s.request_id, []).append(out[i])
            return out

        def keep_prefill(chunks, out):
            for i, c in enumerate(chunks):
                if c.is_last:
                    logits.setdefault(c.seq.request_id, []).append(out[i])
            return out

        def rec_mixed(seqs, chunks):
            self.num_mixed += 1
            d, p = mixed(seqs, chunks)
            return keep_decode(seqs, d), keep_prefill(chunks, p)
        piece = runner.prefill_piece

        def keep_piece(chunks, layers, carry=None, inputs=None):
            """A chunk read in layer pieces (chunk_pieces.py): its logits after the last."""
            out = piece(chunks, layers, carry, inputs)
            return out if isinstance(out, Carry) else keep_prefill(chunks, out)
        runner.prefill_piece = keep_piece
        runner.decode = lambda seqs: keep_decode(seqs, decode(seqs))
        runner.prefill = lambda chunks: keep_prefill(chunks, prefill(chunks))
        runner.mixed = rec_mixed

    def add(self, rid: int, prompt: list[int], max_tokens: int) -> Sequence:
        params = SamplingParams(max_tokens=max_tokens)
        seq = Sequence(rid, list(prompt))
        self.seqs[rid] = seq
        stream = OutputStream(_NoDetok(), frozenset(), params, self.config.max_context)
        self.loop.add(Request(seq, RowSampler(params, prompt), stream))
        return seq

    def run(self, joins: dict[int, list[tuple]] | None = None, max_steps: int = 500):
        """joins: step -> [(rid, prompt, max_tokens)] added before that step."""
        joins = joins or {}
        step = 0
        while (self.loop.has_work or any(k >= step for k in joins)) and step < max_steps:
            for rid, prompt, n in joins.get(step, []):
                self.add(rid, prompt, n)
            self.loop.step()
            self.loop.cache.check_invariants()
            step += 1
        return self
