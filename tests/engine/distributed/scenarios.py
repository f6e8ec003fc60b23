"""The work of each distributed test, written once for one process and for N ranks.

A scenario takes the group (None: one process, no sharding) and returns named
numpy arrays (rank 0's; other ranks return None)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
from qwen_fixtures import Rows, build_model, random_weights, tiny_config
from tiny_models import tiny_llama, tiny_llama_config

from engine.config import EngineConfig
from engine.core.runner import Runner

PROMPT = [5, 17, 42, 99, 3, 250, 7, 11, 64, 128, 200, 31, 8]


def tiny_models(engine_only: bool = True) -> dict:
    """The test's models, float32, random (the same on every rank: seeded)."""
    qcfg = tiny_config("qwen3_5_moe")        # 4 and 8 DeltaNet heads: split in 4 too
    qcfg["text_config"].update(linear_num_key_heads=4, linear_num_value_heads=8)
    models = {"llama": tiny_llama(tiny_llama_config("qwen2", num_attention_heads=4,
                                                    num_key_value_heads=2)),
              "llama_tied": tiny_llama(tiny_llama_config("llama", vocab_size=321)),
              "qwen": build_model(qcfg, random_weights(qcfg, seed=1))}
    if not engine_only:     # Qwen3-Next's fused layout; the dense Qwen3.5 (tied head)
        for i, kind in enumerate(("qwen3_next", "qwen3_5")):
            cfg = tiny_config(kind)
            text = cfg.get("text_config", cfg)
            text.update(linear_num_key_heads=4, linear_num_value_heads=8)
            models[kind] = build_model(cfg, random_weights(cfg, seed=3 + i))
    return models


def _local(model, group):
    if group is None or group.size() == 1:
        return model
    from engine.distributed.sharding import shard_model
    return shard_model(model, group)


def logits(group) -> dict | None:
    """All logits of one prompt (one forward) and of a ragged batch of three rows over
    two forwards (prefill, then a decode step), per model."""
    out = {}
    for name, model in tiny_models(engine_only=False).items():
        model = _local(model, group)
        runner = Runner(model, EngineConfig(page_size=4, num_pages=64, max_num_seqs=4))
        out[f"{name}_full"] = np.array(runner.full_logits(PROMPT))
        rows = Rows(model)
        for s in range(3):
            rows.start(s)
        # Each row's logits at its own last token ([3, 1, V]: a forward without
        # all_logits returns no padding position's logits).
        out[f"{name}_prefill"] = np.array(
            rows.forward({0: PROMPT[:5], 1: PROMPT[:9], 2: PROMPT[:3]}).astype(mx.float32))
        second = rows.forward({0: [9], 1: [10], 2: [11]})
        out[f"{name}_decode"] = np.array(second.astype(mx.float32))
    return out if group is None or group.rank() == 0 else None


# ---- the whole engine: rank 0 schedules, the others follow ---------------------------

PROMPTS = [PROMPT, PROMPT[:4], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 12, 13, 14, 15, 16, 17, 18],
           [1, 2], PROMPT[3:11]]
# No warm-up: these scenarios test what the ranks compute and how they fail, and on a GPU
# a group's warm-up runs every shape at load on every rank (engine_thread._warm_up),
# minutes of compiling on a loaded test machine: the lost-rank scenarios' doomed rank
# then died during it, and engine_turns ran past TIME_LIMIT_S (session 48's H100).
# engine_warmed runs the warm-up on purpose.
CONFIG = EngineConfig(num_pages=96, page_size=4, prefill_chunk=8, max_context=200,
                      max_num_seqs=8, min_stream_tok_s=0.0, warm_up=False)


def _in_memory(name: str, folder):
    from qwen_fixtures import write_tokenizer

    from engine.loading.model_bundle import InMemoryModel
    from engine.tokenization.tokenizer import Tokenizer
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder)
    model = tiny_models()[name]
    return InMemoryModel(model, Tokenizer.from_folder(folder), {}, f"tiny {name}")


def _greedy(max_tokens: int):
    from engine.sampling_params import SamplingParams
    return SamplingParams(max_tokens=max_tokens, temperature=0.0)


def _serve(group, name: str, folder, work, config: EngineConfig = CONFIG):
    """Rank 0: an Engine over the model (sharded when group has ranks) running
    work(engine) -> result; the other ranks follow it until it closes."""
    from engine.core.engine import Engine
    from engine.distributed import cluster as dist
    model = _in_memory(name, folder / f"tok{0 if group is None else group.rank()}")
    c = dist.process_cluster() if group is not None and group.size() > 1 else None
    if c is not None and c.rank != 0:
        code = dist.run_follower(model, config, c)
        if code:
            raise SystemExit(code)
        return None
    dist.join(c)
    try:
        with Engine.from_model(model, config) as engine:
            return work(engine)
    finally:
        dist.join(None)


def _generate(engine) -> dict:
    done = engine.generate(PROMPTS, _greedy(10))
    out = {f"tokens{i}": np.array(c.token_ids) for i, c in enumerate(done)}
    out["logits"] = np.array(engine.logits(PROMPT))
    return out


def engine_llama(group, folder) -> dict | None:
    return _serve(group, "llama", folder, _generate)


def engine_qwen(group, folder) -> dict | None:
    return _serve(group, "qwen", folder, _generate)


def engine_warmed(group, folder) -> dict | None:
    """The load-time warm-up on every rank (rank 0 broadcasts each warm-up step; on a
    CPU it runs them too when asked), then the same work."""
    import dataclasses
    return _serve(group, "qwen", folder, _generate, dataclasses.replace(CONFIG, warm_up=True))


def engine_fixed_shapes(group, folder) -> dict | None:
    """The GPU's path on the CPU: padded batches and chunks (padding rows routed to row
    0's experts), stable block tables, the decode forward through mx.compile."""
    import dataclasses
    return _serve(group, "qwen", folder, _generate,
                  dataclasses.replace(CONFIG, fixed_shapes=True, compile_decode=True))


def engine_preempt(group, folder) -> dict | None:
    """A pool of 24 pages for five growing sequences: the scheduler preempts and
    recomputes; followers just see other block tables."""
    import dataclasses
    return _serve(group, "qwen", folder, _generate_long,
                  dataclasses.replace(CONFIG, num_pages=24, prefix_cache=False))


def _generate_long(engine) -> dict:
    done = engine.generate(PROMPTS, _greedy(24))
    out = {f"tokens{i}": np.array(c.token_ids) for i, c in enumerate(done)}
    out["preempted"] = np.array(sum(c.stats.num_preemptions for c in done) > 0)
    return out


def _cancel_then_reuse(engine) -> dict:
    """Three streams; one is cancelled after 3 tokens; the pool must be empty after the
    rest finish; then a batch reuses the freed pages and must match one process."""
    steps = []
    engine.add_listener(lambda ev: steps.append(ev) if type(ev).__name__ == "StepEvent"
                        else None)
    long = engine.submit(PROMPTS[2], _greedy(40))
    others = [engine.submit(p, _greedy(12)) for p in PROMPTS[:2]]
    seen = 0
    for ev in long:
        if getattr(ev, "token_ids", ()):
            seen += 1
            if seen == 3:
                long.cancel()
    cancelled = long.finished
    rest = [h.result() for h in others]
    used_after = steps[-1].kv_pages_used
    again = engine.generate(PROMPTS, _greedy(10))
    out = {f"tokens{i}": np.array(c.token_ids) for i, c in enumerate(again)}
    out.update(cancel_reason=np.array(cancelled.reason == "cancelled"),
               used_after=np.array(used_after),
               rest=np.array([len(c.token_ids) for c in rest]))
    return out


def engine_cancel(group, folder) -> dict | None:
    import dataclasses
    return _serve(group, "qwen", folder, _cancel_then_reuse,
                  dataclasses.replace(CONFIG, prefix_cache=False))


def _turns(engine) -> dict:
    """Two turns of one conversation: the second reuses the first's kept pages and
    recurrent-state snapshot (page and state copies broadcast to every rank)."""
    first = engine.generate([PROMPT], _greedy(6))[0]
    follow_up = PROMPT + list(first.token_ids) + [21, 22, 23, 24, 25]
    second = engine.generate([follow_up], _greedy(6))[0]
    third = engine.generate([follow_up + list(second.token_ids) + [30, 31]], _greedy(6))[0]
    return {"first": np.array(first.token_ids), "second": np.array(second.token_ids),
            "third": np.array(third.token_ids)}


def engine_turns(group, folder) -> dict | None:
    return _serve(group, "qwen", folder, _turns)


def engine_turns_llama(group, folder) -> dict | None:
    return _serve(group, "llama", folder, _turns)
