"""The engine thread's work: schedule -> run -> postprocess, one step at a time.

Everything here runs on the engine thread, the only thread that touches mx.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from time import thread_time  # apart: tests replace `time` with a simulated clock

import mlx.core as mx

from engine.cache.cache_manager import CacheManager, DeviceCopies
from engine.config import EngineConfig
from engine.core import pool_scatters
from engine.core.alone_prefill_cost import MIXED_FORWARD_SHARE, OWN_FORWARD_SHARE
from engine.core.chunk_pieces import ChunkPieces, merged, on_cuda, pieces_of
from engine.core.compiled_forward import runs_mixed_forwards
from engine.core.disk_transfer import HostCopies, schema
from engine.core.output_stream import OutputStream
from engine.core.prefill_budget import PrefillBudget
from engine.core.runner import Runner, pads_to_fixed_shapes
from engine.core.sampler import RowSampler, sample_batch
from engine.core.scheduler import Scheduler, StepPlan
from engine.core.sequence import Sequence, Status, request_stats
from engine.core.step_event import step_event
from engine.events import ErrorEvent, FinishedEvent, TokenEvent
from engine.models.base import kernel_set_of

# FinishedEvent.message of a reply the KV pool could not hold any longer.
POOL_FULL_NOTE = ("The reply filled the whole KV cache and was cut here; raise the KV "
                  "budget in Settings (or shorten the conversation) for longer replies.")

# Bytes of kept turns copied to the host per busy step (~10 ms of memcpy).
HOST_COPY_BYTES = 32 << 20


def pipelines_steps(config: EngineConfig) -> bool:
    """config.pipeline_steps, or when None: on a GPU (where the device runs a step while
    the host builds the next; MLX's CPU backend runs it while it is being queued)."""
    if config.pipeline_steps is not None:
        return config.pipeline_steps
    return mx.default_device().type == mx.DeviceType.gpu


class Request:
    """Engine-side state of one request: its sequence, sampler and output stream."""

    def __init__(self, seq: Sequence, sampler: RowSampler, stream: OutputStream):
        self.seq, self.sampler, self.stream = seq, sampler, stream


class StepLoop:
    def __init__(self, model, config: EngineConfig, emit: Callable[[object], None],
                 num_pages: int, disk_cache=None, make_runner=None):
        """num_pages: the KV pool's size, page 0 included (kv_budget.num_pages_for).
        disk_cache: a DiskCache kept turns are written to and read back from, or a
        function of the cache schema (disk_transfer.schema) that opens one.
        make_runner: Runner's constructor or a subclass's (engine/distributed/leader.py)."""
        self.config = config
        self.mixed_forwards = runs_mixed_forwards(config)   # one forward for a mixed step
        self.pipelines = pipelines_steps(config)            # step n+1 queued before n is read
        self.runner = (make_runner or Runner)(model, config, num_pages)
        self.kernels = kernel_set_of(model)     # the sampler's too (kernels/top_p_cut)
        # The pool's memory is taken now, while the model loads, not during the first
        # request (2.4 GB of zeros cost ~4 s on a CPU: a restarted conversation's TTFT).
        mx.eval(self.runner.cache_arrays())
        self.schema = schema(self.runner.cache)
        if callable(disk_cache):
            disk_cache = disk_cache(self.schema)
        self.disk = disk_cache
        self.host_copies = HostCopies(disk_cache, self.schema)
        # Recurrent states cannot be rewound: such models reuse whole kept turns only.
        recurrent = bool(model.cache_spec().state_layers)
        self.cache = CacheManager(
            num_pages, config.page_size, config.num_state_slots,
            keep_turns=config.num_cached_turns if config.prefix_cache else None,
            exact_prefix_only=recurrent, disk=disk_cache)
        self.scheduler = Scheduler(config, self.cache)
        self.requests: dict[int, Request] = {}
        self.emit = emit          # every event, once (Engine._emit routes it)
        self.num_steps = 0
        # The step whose tokens are still on the device:
        # (plan, sampled, t_start, saves, seconds its queuing took).
        self._inflight = None
        self._current: StepPlan | None = None    # the plan being queued (step_failed)
        self._completing: StepPlan | None = None # the plan being read back (step_failed)
        # A chunk read beside decode rows a layer range a step (engine/core/chunk_pieces.py):
        # the budget prices one step's share of it, of at most prefill_chunk / K tokens.
        if (config.chunk_pieces or 1) > 1 and not self.runner.reads_in_pieces:
            raise ValueError("EngineConfig.chunk_pieces > 1: this runner cannot read a "
                             "chunk in layer pieces (the distributed engine)")
        layers = len(self.runner.model.layers)
        self.pieces = ChunkPieces(pieces_of(config, layers, self.runner.reads_in_pieces), layers)
        # On CUDA a step with prompt work queues its decode rows' draw, its chunk's forward
        # (or piece) and its prompts' draws as three graphs. Queued as one, every pairing
        # of the rows' sampling settings, the chunk's layout and the prompts' settings was
        # a graph shape of its own, and MLX's CUDA backend keeps one exec per shape,
        # instantiates one on a miss (ms of host time) and would throw after 800 misses
        # (turned off: engine/cuda_graph_cache.py; docs/RELIABILITY.md;
        # engine/bench/step_graphs.py counts them: 1,145 -> 234 distinct in a minute of
        # the soak's load, GPU defaults on the CPU). Not elsewhere: on the CPU the split made a
        # prompt beside 3 streams ~8 % slower (engine.bench.concurrency, 6 pairs), and
        # Metal keeps no such cache.
        self.draws_apart = on_cuda()
        self.budget = PrefillBudget(
            config.prefill_chunk // self.pieces.k, config.min_stream_tok_s,
            config.max_decode_slowdown,
            MIXED_FORWARD_SHARE if self.mixed_forwards else OWN_FORWARD_SHARE,
            pads_to_fixed_shapes(config))

    @property
    def has_work(self) -> bool:
        """Requests to run, or kept turns still to gather or copy for the disk cache."""
        return (self.scheduler.has_work or self.cache.has_pending_saves
                or bool(self.host_copies) or bool(self.pieces.held))

    def add(self, request: Request) -> None:
        self.requests[request.seq.request_id] = request
        self.scheduler.add(request.seq)

    def cancel(self, request_id: int) -> None:
        req = self.requests.get(request_id)
        if req is not None:
            # Read the step in flight first: the ids kept for the conversation's next
            # turn must be exactly the tokens whose K/V and state are in the cache.
            self.flush()
        if request_id in self.requests:
            self._finish(req, "cancelled", req.stream.finish())

    def step(self) -> None:
        """Queue step n on the device, then read and post-process step n-1 while it runs."""
        plan = self._plan()
        for seq in plan.exhausted:      # no preemption can make room: it ends here
            req = self.requests[seq.request_id]
            self._finish(req, "length", req.stream.finish(), POOL_FULL_NOTE)
        self._current = plan
        saves = self.runner.copy(plan.copies)   # even for an empty plan: they are due now
        copies = plan.copies
        if self.draws_apart and (copies.pages or copies.states or copies.loads):
            # On CUDA the copies are a graph of their own, as the draws are (draws_apart):
            # queued with the forward they would shift where MLX cuts its graphs (every
            # ~100 kernels) through the whole step, so a step after prompts end would
            # commit structures its exec cache has never met (new instantiates).
            pool_scatters.queue(self.runner.cache_arrays())
        if plan.is_empty:
            self._current = None        # it involves no request
            self.flush()
            self._hand_to_disk(saves)
            self.host_copies.pump(float("inf"))     # idle: nothing to stall
            return
        t0, c0 = time.perf_counter(), thread_time()
        sampled = self._run(plan, [a for _, arrays in saves for a in arrays.values()])
        # wall and this thread's CPU seconds: a queue far longer than its CPU time waited
        # (MLX's eval blocking, or the host's other work taking this thread's core)
        queued = (time.perf_counter() - t0, thread_time() - c0)
        self.budget.queued(len(plan.decode), plan.prefill_tokens)   # observed when read back
        previous, self._inflight = self._inflight, (plan, sampled, t0, saves, queued)
        if previous is not None:
            self._complete(previous, t_end=t0)
        # Nothing left to run: read the last step now, or it would last until the next
        # request arrives and span the idle time between (a step is not idle time).
        # Host copies still due for the disk cache are not a step to run.
        if not self._can_pipeline() or not self.scheduler.has_work:
            self.flush()
        self._current = None
        self.host_copies.pump(HOST_COPY_BYTES)

    def _plan(self) -> StepPlan:
        """The scheduler's plan; when it must preempt while step n-1's tokens are still
        on the device, it plans nothing and asks for them first (StepPlan.resolve_first):
        planning never calls back into this loop."""
        if self.pieces.chain is not None:
            plan = self.pieces.go_on(self._schedule(0), self.requests, self.cache)
            if plan is not None:
                # A chain that ended under a decode step leaves it decode only: no chunk
                # to price (a 0-token chunk has no padded length).
                if plan.decode and plan.prefills:
                    plan.predicted_s = self.budget.predicted_s(plan.span_tokens)
                return plan
        decoding = any(not s.is_prefilling for s in self.scheduler.running)
        prompt_left = self.scheduler.prompt_tokens_left()
        # The budget prices one step's share, a K-th, of a chunk (chunk_pieces.py); alone
        # its whole chunk (prefill_chunk / K) times K is the whole prefill_chunk.
        allowance = self.budget.allowance(decoding, self.pieces.budget_share(prompt_left))
        plan = self._schedule(allowance.tokens * self.pieces.k)
        self.pieces.release(plan)
        # Degraded only matters where a prompt was read beside a decode.
        plan.degraded = allowance.degraded and bool(plan.decode and plan.prefills)
        self.pieces.begin(plan, self.runner.prefill_inputs)
        if plan.decode and plan.prefills:
            plan.predicted_s = self.budget.predicted_s(plan.prefill_tokens)
        if plan.decode and (plan.prefills or prompt_left):
            plan.chunk_reason = allowance.why
        return plan

    def _schedule(self, tokens: int) -> StepPlan:
        plan = self.scheduler.schedule(tokens)
        if plan.resolve_first:
            self.flush()
            plan = self.scheduler.schedule(tokens)
            assert not plan.resolve_first, "nothing is in flight after a flush"
        return plan

    def flush(self) -> None:
        """Read back the step still in flight (before going idle, or before a cancel)."""
        if self._inflight is not None:
            previous, self._inflight = self._inflight, None
            self._complete(previous, t_end=None)

    def _can_pipeline(self) -> bool:
        # The repetition penalty needs every earlier token on the host before sampling.
        return self.pipelines and all(r.sampler.params.repetition_penalty == 1.0
                                      for r in self.requests.values())

    def save_kept_turns(self) -> None:
        """Gather kept turns not yet written and hand them to the disk cache (closing)."""
        self.flush()
        self.pieces.drop(self.cache)    # its requests were cancelled (closing)
        copies, self.pieces.held = (merged(self.pieces.held, self.cache.take_copies()),
                                    DeviceCopies())
        self._hand_to_disk(self.runner.copy(copies))
        self.host_copies.pump(float("inf"))

    def _hand_to_disk(self, saves) -> None:
        """Queue evaluated gathered saves for their host copies (HostCopies)."""
        if not saves or self.disk is None:
            return
        mx.eval([a for _, arrays in saves for a in arrays.values()])   # reads only
        self.host_copies.add(saves)

    def _complete(self, inflight, t_end: float | None) -> None:
        plan, sampled, t0, saves, queued = inflight
        self._completing = plan          # involved if reading it back raises
        t_read = time.perf_counter()
        self._hand_to_disk(saves)          # evaluated with that step
        self._postprocess(plan, sampled)
        self._completing = None
        read_s = time.perf_counter() - t_read
        # A step lasts until the next one starts: the cadence a stream sees.
        self._emit_step(plan, t0, t_end or time.perf_counter(), queued, read_s)

    # -- run ----------------------------------------------------------------
    def _run(self, plan: StepPlan, extra: list[mx.array]) -> list[tuple[Request, mx.array, int]]:
        """Queue the step's forwards on the device (and `extra` arrays to evaluate with
        them); returns (request, ids, row) to read."""
        decode_logits, prefill_logits = self._forwards(plan)
        out = []
        if plan.decode:
            reqs = [self.requests[s.request_id] for s in plan.decode]
            ids = sample_batch(decode_logits, [r.sampler for r in reqs], self.kernels)
            out += [(r, ids, i) for i, r in enumerate(reqs)]
            if plan.prefills and self.draws_apart:
                mx.async_eval(ids)      # the draw reads no pool: the chunk's queue settles
        if plan.prefills and self.draws_apart:
            # The rows' draw (above), the chunk's forward or piece, then the prompts'
            # draws (below), each its own graph (see draws_apart).
            pool_scatters.queue(self.pieces.carried if prefill_logits is None
                                else [prefill_logits], self.runner.cache_arrays())
        if plan.prefills and prefill_logits is not None:
            out += self._sample_prefill(plan.prefills, prefill_logits)
        elif plan.prefills:             # a chunk's piece before its last: nothing read yet
            now = time.perf_counter()
            for c in plan.prefills:
                c.seq.t_prefill_start = c.seq.t_prefill_start or now
            extra = extra + self.pieces.carried
        for s in plan.decode:
            s.num_computed = s.num_tokens
        for req, ids, row in out:
            req.seq.pending.append((ids, row))
        pool_scatters.queue([ids for _, ids, _ in out] + self.runner.cache_arrays() + extra)
        return out

    def _forwards(self, plan: StepPlan) -> tuple[mx.array | None, mx.array | None]:
        """(decode logits [n, V], prompt chunks' last-token logits [B, V]), None where the
        plan has none: one mixed forward when it has both (runs_mixed_forwards)."""
        if plan.decode and plan.prefills and self.mixed_forwards:
            return self.runner.mixed(plan.decode, plan.prefills)
        decode = self.runner.decode(plan.decode) if plan.decode else None
        if decode is not None and plan.prefills:
            # The decode's kernels write K/V and states into the pools in place, and MLX's
            # GPU backends order work by declared outputs only: inside one CUDA graph (or
            # Metal's concurrent encoder) the chunk's scatter into the same pool, or the
            # copy of it that a scatter makes when it cannot update it in place, has no
            # edge to those writes and may read the pool before them. Queued on its own,
            # the decode is committed before any of the chunk's work.
            pool_scatters.queue(decode, self.runner.cache_arrays())
        if plan.span is not None:
            return decode, self.pieces.run(self.runner, plan)
        return decode, (self.runner.prefill(plan.prefills) if plan.prefills else None)

    def _sample_prefill(self, chunks, logits: mx.array) -> list[tuple[Request, mx.array, int]]:
        """Sample where a prompt's last chunk ends (logits [B, V]: each chunk's last)."""
        now = time.perf_counter()
        finishing = [i for i, c in enumerate(chunks) if c.is_last]
        for c in chunks:
            c.seq.t_prefill_start = c.seq.t_prefill_start or now
            c.seq.num_computed = c.start + c.num_tokens
        if not finishing:
            return []
        reqs = [self.requests[chunks[i].seq.request_id] for i in finishing]
        if len(finishing) < len(chunks):
            logits = logits[mx.array(finishing)]
        ids = sample_batch(logits, [r.sampler for r in reqs], self.kernels)
        return [(r, ids, row) for row, r in enumerate(reqs)]

    # -- postprocess --------------------------------------------------------
    def _postprocess(self, plan: StepPlan, sampled) -> None:
        host = {}
        for req, ids, row in sampled:
            values = host.setdefault(id(ids), ids.tolist())
            if req.seq.pending:
                req.seq.pending.pop(0)
            try:
                self._accept(req, int(values[row]))
            except Exception as e:   # this request's own output (detokenizer, stop): only it
                if req.seq.request_id in self.requests:
                    self._fail(req, f"Tandem failed while reading this reply: "
                                    f"{type(e).__name__}: {e}")

    def _accept(self, req: Request, token: int) -> None:
        seq = req.seq
        if seq.is_finished:          # finished by an earlier token or cancelled: drop it
            return
        now = time.perf_counter()
        if seq.t_first_token is None:
            seq.t_first_token = now
        seq.output_ids.append(token)
        req.sampler.append(token)
        delta = req.stream.add(token, len(seq.output_ids), seq.num_tokens)
        if delta or req.stream.finish_reason is None:
            self.emit(TokenEvent(seq.request_id, delta, (token,)))
        if req.stream.finish_reason is not None:
            self._finish(req, req.stream.finish_reason, "")

    def _finish(self, req: Request, reason: str, delta: str, message: str = "") -> None:
        seq = req.seq
        if delta:
            self.emit(TokenEvent(seq.request_id, delta, ()))
        seq.pending.clear()          # tokens still in flight for it are discarded
        self.scheduler.finish(seq, reason)
        seq.t_finish = time.perf_counter()
        del self.requests[seq.request_id]
        self.emit(FinishedEvent(seq.request_id, reason, request_stats(seq),
                                  req.stream.text, tuple(seq.output_ids), message))

    def _fail(self, req: Request, message: str) -> None:
        """End one request as "error", its reason sent as an ErrorEvent and kept in the
        FinishedEvent (stream=False handles and the app read it there)."""
        req.seq.pending.clear()
        self.emit(ErrorEvent(req.seq.request_id, message))
        self._finish(req, "error", req.stream.finish(), message)

    def fail_all(self, message: str) -> None:
        self._inflight = self._current = self._completing = None
        self.pieces.drop(self.cache)
        self.budget.drop_queued()
        for req in list(self.requests.values()):
            self._fail(req, message)

    def step_failed(self, message: str) -> None:
        """A step raised: fail only the requests it involved (the plans being queued, read
        back and in flight). Their tokens on the device are lost. A new prompt the step
        read (no token out yet) is failed: new input is the likely cause. A request that
        already had tokens (decoding, or recomputed after a preemption) is recomputed
        from its known ids (preempted), once: a second failed step that involves it
        fails it too. Requests the step did not touch go on. Nothing known involved:
        everything fails."""
        plans = [p for p in (self._current, self._completing,
                             self._inflight and self._inflight[0]) if p]
        self._inflight = self._current = self._completing = None
        self.pieces.drop(self.cache)
        self.budget.drop_queued()
        reading = {c.seq.request_id for p in plans for c in p.prefills}
        involved = {s.request_id for p in plans for s in p.decode} | reading
        if not involved:
            return self.fail_all(message)
        for rid in involved:
            req = self.requests.get(rid)
            if req is None:
                continue
            req.seq.pending.clear()
            req.seq.num_failed_steps += 1
            if (rid in reading and not req.seq.output_ids) or req.seq.num_failed_steps > 1:
                self._fail(req, message)
            elif req.seq.status is Status.RUNNING:
                self.scheduler.preempt(req.seq)

    def cancel_all(self) -> None:
        """The engine is closing: every request ends as "cancelled" with its text."""
        try:
            self.flush()
        except Exception:       # the step in flight failed: its tokens are lost
            self._inflight = None
            self.budget.drop_queued()
        for req in list(self.requests.values()):
            req.seq.pending.clear()
            self._finish(req, "cancelled", req.stream.finish())

    def _emit_step(self, plan: StepPlan, t0: float, t1: float,
                   queued: tuple[float, float], read_s: float) -> None:
        self.num_steps += 1
        self.budget.observe(t1 - t0, len(plan.decode), plan.prefill_tokens)
        self.emit(step_event(self.num_steps, plan, t0, t1, self.cache, self.scheduler,
                             *queued, read_s=read_s))
