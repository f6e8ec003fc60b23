"""The engine thread: load the model, then schedule -> run -> postprocess until Close.

Engine (engine/core/engine.py) is the callers' side; this is the one thread that touches
mx. It reads the inbox's messages between steps, emits every event through Engine's one
path (`emit`), and sets the load's future once the model and the KV pool are ready.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future

from engine.cache.kv_budget import num_pages_for
from engine.cache.model_identity import open_disk_cache, weights_mode
from engine.config import EngineConfig
from engine.core import gc_freeze
from engine.core.compile_release import release_thread_compiled
from engine.core.inbox import CacheNotice, Cancel, Close, Logits, Message, SetReadingPace, Submit
from engine.core.mlx_threads import clear_thread_streams
from engine.core.step_loop import StepLoop
from engine.core.warm_up import (
    BackgroundWarmUp,
    background_shapes,
    load_shapes,
    should_warm_up,
    warm_sampler,
    warm_up,
)
from engine.distributed.cluster import current_cluster
from engine.events import CacheNoticeEvent, LoadProgress, SubmittedEvent
from engine.loading.model_bundle import InMemoryModel, ModelBundle, load_bundle


class EngineThread:
    def __init__(self, config: EngineConfig, inbox: queue.Queue, emit: Callable[[object], None],
                 loaded: Future, on_pool: Callable[[int, int], None],
                 abandon: Callable[[str], None]):
        """on_pool(num_pages, kv_page_bytes): the pool is sized (before `loaded` is set);
        abandon(message): a rank of a distributed group is lost (Engine._abandon)."""
        self.config = config
        self._inbox = inbox
        self._emit = emit
        self._loaded = loaded
        self._on_pool = on_pool
        self._abandon = abandon
        # Set once no warm-up shape is left (at once where none runs in the background).
        self.warmed = threading.Event()
        self._runner = None     # the step loop's, once built (its compiled forwards)

    def main(self, model, on_progress, quantize_bits) -> None:
        """The thread's target: serve until Close, then clear MLX's streams."""
        try:
            self._serve(model, on_progress, quantize_bits)
        finally:
            # What this thread compiled goes while it can still erase its traces
            # (engine/core/compile_release.py), then its streams: MLX 0.32 needs each
            # thread that used mx to clear them before it ends, or the process aborts at
            # exit (ml-explore/mlx#3395).
            release_thread_compiled(self._runner)
            self._runner = None
            clear_thread_streams()

    def _serve(self, model, on_progress, quantize_bits) -> None:
        # Rank 0 of several processes (engine/distributed): its shard, broadcast steps.
        cluster = current_cluster()
        try:
            bundle = (cluster.load_bundle if cluster else load_bundle)(
                model, self.config, on_progress, quantize_bits)
            spec = bundle.model.cache_spec()
            num_pages = num_pages_for(self.config, spec)
            self._on_pool(num_pages, self.config.page_size * spec.kv_bytes_per_token())
            # Takes the pool's memory and opens the disk cache; the warm-up then writes
            # only the scratch page and slot, so nothing read from disk is touched.
            disk = self._disk_opener(model, bundle, quantize_bits)
            if cluster and disk:            # its files hold every rank's part of a turn
                disk = cluster.disk_opener(disk)
            loop = StepLoop(bundle.model, self.config, self._emit, num_pages,
                            disk_cache=disk,
                            make_runner=cluster.make_runner if cluster else None)
            self._runner = loop.runner
            if cluster:
                cluster.watch(lambda: loop.has_work, self._abandon)
            report = on_progress or (lambda p: None)
            background = self._warm_up(loop, cluster, report)
            report(LoadProgress(1.0, "Ready"))
        except BaseException as e:
            self.warmed.set()
            self._loaded.set_exception(e)
            return
        gc_freeze.engine_ready()        # what is alive now lives as long as the engine
        try:
            self._loaded.set_result(bundle)
            self._run(loop, background, cluster)
        finally:
            gc_freeze.engine_closed()

    def _run(self, loop: StepLoop, background: BackgroundWarmUp, cluster) -> None:
        """Serve until Close: the inbox between steps, idle time to the background warm-up."""
        while True:
            try:
                # A cancel reads the step in flight back: it can raise like a step.
                if not self._drain(loop, block=not loop.has_work and not background.pending):
                    break
                loop.step()
                if background.pending and not loop.has_work:
                    background.run_one(loop.runner)     # then back to the inbox
            except Exception as e:   # keep serving: fail only what the step involved, say why
                traceback.print_exc()
                if cluster and cluster.failed(e):     # a rank is lost: nothing can run
                    loop.fail_all(cluster.failure_message or str(e))
                    continue
                loop.step_failed(f"The engine failed while running this request: "
                                 f"{type(e).__name__}: {e}")
        loop.cancel_all()
        self._close_disk_cache(loop)
        if cluster:
            cluster.shutdown()

    def _warm_up(self, loop: StepLoop, cluster, report) -> BackgroundWarmUp:
        """The load-time part of the warm-up; returns the part left for idle time (none
        without a warm-up, or in a distributed group, whose ranks run only the steps
        rank 0 broadcasts: there all of it runs at load)."""
        if not should_warm_up(self.config):
            return BackgroundWarmUp([], self.warmed)
        config = self.config
        if cluster:
            config = dataclasses.replace(config, warm_up_in_background=False)
        warm_up(loop.runner, config, report, shapes=load_shapes(config))
        warm_sampler(loop.runner, report)
        return BackgroundWarmUp(background_shapes(config), self.warmed)

    def _disk_opener(self, model, bundle: ModelBundle, quantize_bits: int | None):
        """Opens the disk cache (EngineConfig.cache_dir) for the loaded model's layout;
        None for a model built in memory (its weights are no files to identify it by)."""
        if isinstance(model, InMemoryModel):
            return None
        recurrent = bool(bundle.model.cache_spec().state_layers)
        weights = weights_mode(quantize_bits, bundle.weights.get("mode", ""))
        notify = self._send_notice
        return lambda schema: open_disk_cache(self.config, bundle.path, bundle.config,
                                              weights, schema, recurrent, notify)

    def _send_notice(self, message: str) -> None:
        self._inbox.put(CacheNotice(message))   # listeners hear it on the engine thread

    @staticmethod
    def _close_disk_cache(loop: StepLoop) -> None:
        """Write the turns kept since the last step (the replies cancel_all just ended
        included), then let the disk cache's writer finish."""
        if loop.disk is None:
            return
        try:
            loop.save_kept_turns()
        except Exception:     # closing must not fail because of the cache
            traceback.print_exc()
        loop.disk.close()

    def _drain(self, loop: StepLoop, block: bool) -> bool:
        """Apply queued messages; False once closing."""
        while True:
            try:
                message = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if isinstance(message, Close):
                return False
            self._apply(loop, message)

    def _apply(self, loop: StepLoop, message: Message) -> None:
        if isinstance(message, Submit):
            seq = message.request.seq
            self._emit(SubmittedEvent(seq.request_id, seq.t_submit, len(seq.prompt_ids)))
            loop.add(message.request)
        elif isinstance(message, Cancel):
            loop.cancel(message.request_id)
        elif isinstance(message, CacheNotice):
            self._emit(CacheNoticeEvent(message.message))
        elif isinstance(message, SetReadingPace):
            loop.budget.min_stream_tok_s = message.min_stream_tok_s
        elif isinstance(message, Logits):
            try:
                message.future.set_result(loop.runner.full_logits(list(message.token_ids)))
            except Exception as e:
                message.future.set_exception(e)
